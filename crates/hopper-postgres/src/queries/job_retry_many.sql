-- Bulk manual retry of dead-lettered jobs, optionally of one queue ($1) and kind ($2):
-- available now ($3, NULL: the database's clock) with a fresh set of attempts, as
-- job_retry.sql does for one. One row, and one wake-up, per queue touched.
--
-- A job with a unique key is retried only while no waiting or running job holds the key,
-- and of several failed jobs of one key only the latest: the retry puts it back into
-- jobs_unique_active_idx, and one job of the batch breaking that index would refuse the
-- whole batch (the single retry refuses it with a conflict). The others stay failed. An
-- insert taking a key between the check and the update still breaks the index; the
-- caller then runs the statement again, which sees that holder.
-- Index: the keyed candidates probe jobs_unique_active_idx (unique_key) once each (the
-- subquery repeats its predicate); the sort of DISTINCT ON is over failed jobs with keys.
WITH keyed AS (
    SELECT DISTINCT ON (f.unique_key) f.id
    FROM hopper.jobs AS f
    WHERE f.state = 'failed'
      AND f.unique_key IS NOT NULL
      AND ($1::text IS NULL OR f.queue = $1)
      AND ($2::text IS NULL OR f.kind = $2)
      AND NOT EXISTS (
          SELECT 1
          FROM hopper.jobs AS h
          WHERE h.unique_key = f.unique_key
            AND h.unique_key IS NOT NULL
            AND h.state IN ('scheduled', 'available', 'running')
      )
    ORDER BY f.unique_key, f.id DESC
),
retried AS (
    UPDATE hopper.jobs
    SET state = 'available',
        run_at = coalesce($3::timestamptz, now()),
        uncounted = attempt,
        finished_at = NULL
    WHERE state = 'failed'
      AND ($1::text IS NULL OR queue = $1)
      AND ($2::text IS NULL OR kind = $2)
      AND (unique_key IS NULL OR id IN (SELECT id FROM keyed))
    RETURNING queue
)
SELECT count(*), pg_notify('hopper_wake', 'a:' || queue)
FROM retried
GROUP BY queue
