-- Completes one attempt; `job_finish_many` runs it once per completed outcome, all in one
-- transaction. The row is touched only while it is still running under the given attempt
-- (the fencing check); no row returned means the lease was lost.
UPDATE hopper_jobs
SET state = 'completed',
    finished_at = :now,
    duration_ms = :duration_ms,
    lease_expires_at = NULL
WHERE id = :id
  AND attempt = :attempt
  AND state = 'running'
RETURNING state, queue
