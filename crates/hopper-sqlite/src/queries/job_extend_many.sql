-- Heartbeat: moves one lease still held to :by_us from :now, never earlier than it was (a
-- heartbeat after a handler's longer extend keeps the longer); run once per lease, all in
-- one transaction. No row changed means the lease was lost.
UPDATE hopper_jobs
SET lease_expires_at = max(ifnull(lease_expires_at, 0), :now + :by_us)
WHERE id = :id
  AND attempt = :attempt
  AND state = 'running'
