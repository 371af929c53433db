-- Puts one attempt back without counting it; `job_finish_many` runs it once per snoozed or
-- released outcome, all in one transaction. Snoozed jobs wait :retry_us, released ones
-- (graceful shutdown) are available at once. No row returned means the lease was lost.
UPDATE hopper_jobs
SET state = CASE WHEN :retry_us > 0 THEN 'scheduled' ELSE 'available' END,
    run_at = :now + :retry_us,
    uncounted = uncounted + 1,
    lease_expires_at = NULL
WHERE id = :id
  AND attempt = :attempt
  AND state = 'running'
RETURNING state, queue
