-- Bulk manual retry of dead-lettered jobs, optionally of one queue and kind: available
-- now with a fresh set of attempts, as job_retry.sql does for one. One row per job, with
-- its queue, so the backend can wake each queue once.
--
-- A job with a unique key is retried only while no waiting or running job holds the key,
-- and of several failed jobs of one key only the latest: the retry puts it back into
-- hopper_jobs_unique_active_idx, and one job of the batch breaking that index would refuse
-- the whole batch (the single retry refuses it with a conflict). The others stay failed.
-- The writer's lock (BEGIN IMMEDIATE) keeps inserts out between the check and the update.
-- Index: the keyed candidates probe hopper_jobs_unique_active_idx once each (the subquery
-- repeats its predicate).
UPDATE hopper_jobs
SET state = 'available',
    run_at = :now,
    uncounted = attempt,
    finished_at = NULL
WHERE state = 'failed'
  AND (:queue IS NULL OR queue = :queue)
  AND (:kind IS NULL OR kind = :kind)
  AND (unique_key IS NULL OR id IN (
      SELECT max(f.id)
      FROM hopper_jobs AS f
      WHERE f.state = 'failed'
        AND f.unique_key IS NOT NULL
        AND (:queue IS NULL OR f.queue = :queue)
        AND (:kind IS NULL OR f.kind = :kind)
        AND NOT EXISTS (
            SELECT 1
            FROM hopper_jobs AS h
            WHERE h.unique_key = f.unique_key
              AND h.unique_key IS NOT NULL
              AND h.state IN ('scheduled', 'available', 'running')
        )
      GROUP BY f.unique_key))
RETURNING queue
