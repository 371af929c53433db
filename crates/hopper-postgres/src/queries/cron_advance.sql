-- Moves a periodic job to its next tick, if no other node did it first (compare-and-set
-- on next_run_at). The caller inserts the tick's jobs in the same transaction only when a
-- row comes back. $1 name, $2 expected next_run_at, $3 new next_run_at, $4 last tick
-- enqueued, $5 its job.
--
-- Never waits on another transaction's lock on the row: each node's periodic loop
-- advances its entries one after the other, so an admin's transaction left open on one
-- row would stop every periodic job of every node. The row is locked first with SKIP
-- LOCKED; a held row is not advanced now (no row comes back, as when another node moved
-- it) and the caller looks again shortly. Two nodes advancing the same tick: the first
-- holds the row until its commit, the second skips it (the tick is the first's); a row
-- whose update committed meanwhile is read again and no longer matches.
-- Index: cron_jobs_pkey.
WITH target AS MATERIALIZED (
    SELECT name
    FROM hopper.cron_jobs
    WHERE name = $1
      AND next_run_at = $2
    FOR UPDATE SKIP LOCKED
)
UPDATE hopper.cron_jobs AS c
SET next_run_at = $3,
    last_run_at = coalesce($4, last_run_at),
    last_job_id = coalesce($5, last_job_id)
FROM target AS t
WHERE c.name = t.name
RETURNING c.name
