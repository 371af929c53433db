-- Bulk manual retry of dead-lettered jobs, optionally of one queue ($1) and kind ($2):
-- available now ($3, NULL: the database's clock) with a fresh set of attempts, as
-- job_retry.sql does for one. One row, and one wake-up, per queue touched.
WITH retried AS (
    UPDATE hopper.jobs
    SET state = 'available',
        run_at = coalesce($3::timestamptz, now()),
        uncounted = attempt,
        finished_at = NULL
    WHERE state = 'failed'
      AND ($1::text IS NULL OR queue = $1)
      AND ($2::text IS NULL OR kind = $2)
    RETURNING queue
)
SELECT count(*), pg_notify('hopper_wake', 'a:' || queue)
FROM retried
GROUP BY queue
