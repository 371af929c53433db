-- Manual retry of a failed or cancelled job: available now, with a fresh set of attempts
-- (the ones used so far stop counting). The error history is kept.
UPDATE hopper_jobs
SET state = 'available',
    run_at = :now,
    uncounted = attempt,
    finished_at = NULL
WHERE id = :id
  AND state IN ('failed', 'cancelled')
RETURNING queue
