-- Cancels an unfinished job. A running job's lease is revoked by the state change (its
-- worker's outcome will be refused); handlers in this process are told through the
-- backend's wake-up channel.
UPDATE hopper_jobs
SET state = 'cancelled',
    finished_at = :now,
    lease_expires_at = NULL
WHERE id = :id
  AND state IN ('scheduled', 'available', 'running')
RETURNING queue
