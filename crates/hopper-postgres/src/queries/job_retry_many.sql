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
--
-- Index: the failed jobs are read once, into candidates (no index has them: a retry of
-- many is rare and manual); the update finds each chosen one by its primary key and checks
-- its state again. The keyed candidates are checked against jobs_unique_active_idx
-- (unique_key; the subquery repeats its predicate), a probe each or one read of it hashed;
-- the sort of DISTINCT ON is over the keyed candidates only.
WITH candidates AS (
    SELECT f.id, f.unique_key
    FROM hopper.jobs AS f
    WHERE f.state = 'failed'
      AND ($1::text IS NULL OR f.queue = $1)
      AND ($2::text IS NULL OR f.kind = $2)
),
keyed AS (
    SELECT DISTINCT ON (c.unique_key) c.id
    FROM candidates AS c
    WHERE c.unique_key IS NOT NULL
      AND NOT EXISTS (
          SELECT 1
          FROM hopper.jobs AS h
          WHERE h.unique_key = c.unique_key
            AND h.unique_key IS NOT NULL
            AND h.state IN ('scheduled', 'available', 'running')
      )
    ORDER BY c.unique_key, c.id DESC
),
chosen AS (
    SELECT id FROM candidates WHERE unique_key IS NULL
    UNION ALL
    SELECT id FROM keyed
),
retried AS (
    UPDATE hopper.jobs AS j
    SET state = 'available',
        run_at = coalesce($3::timestamptz, now()),
        uncounted = j.attempt,
        finished_at = NULL
    FROM chosen
    WHERE j.id = chosen.id
      AND j.state = 'failed'
    RETURNING j.queue
)
SELECT count(*), pg_notify('hopper_wake', 'a:' || queue)
FROM retried
GROUP BY queue
