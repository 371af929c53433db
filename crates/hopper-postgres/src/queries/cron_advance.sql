-- Moves a periodic job to its next tick, if no other node did it first (compare-and-set
-- on next_run_at; the row lock makes the second of two concurrent nodes re-check and
-- find the new value). The caller inserts the tick's jobs in the same transaction only
-- when a row comes back. $1 name, $2 expected next_run_at, $3 new next_run_at,
-- $4 last tick enqueued, $5 its job.
UPDATE hopper.cron_jobs
SET next_run_at = $3,
    last_run_at = coalesce($4, last_run_at),
    last_job_id = coalesce($5, last_job_id)
WHERE name = $1
  AND next_run_at = $2
RETURNING name
