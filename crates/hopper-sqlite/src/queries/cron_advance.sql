-- Moves a periodic job to its next tick if no other node did it first: a compare-and-set
-- on next_run_at, inside the `BEGIN IMMEDIATE` transaction that also inserts the tick's
-- jobs (only when a row comes back).
UPDATE hopper_cron_jobs
SET next_run_at = :next_run_at,
    last_run_at = coalesce(:last_run_at, last_run_at),
    last_job_id = coalesce(:last_job_id, last_job_id)
WHERE name = :name
  AND next_run_at = :expected
RETURNING name
