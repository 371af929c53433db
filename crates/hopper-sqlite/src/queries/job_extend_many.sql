-- Heartbeat: moves one lease still held to :by_us from :now; run once per lease, all in
-- one transaction. No row changed means the lease was lost.
UPDATE hopper_jobs
SET lease_expires_at = :now + :by_us
WHERE id = :id
  AND attempt = :attempt
  AND state = 'running'
