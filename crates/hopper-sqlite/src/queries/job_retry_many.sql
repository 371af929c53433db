-- Bulk manual retry of dead-lettered jobs, optionally of one queue and kind: available
-- now with a fresh set of attempts, as job_retry.sql does for one. One row per job, with
-- its queue, so the backend can wake each queue once.
UPDATE hopper_jobs
SET state = 'available',
    run_at = :now,
    uncounted = attempt,
    finished_at = NULL
WHERE state = 'failed'
  AND (:queue IS NULL OR queue = :queue)
  AND (:kind IS NULL OR kind = :kind)
RETURNING queue
