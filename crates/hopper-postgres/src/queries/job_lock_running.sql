-- The way around held rows for a batch of outcomes (outcomes.rs): run first in the
-- transaction that then writes them, it locks the rows still running under the given
-- leases, skipping those another transaction holds, and returns the held ones: their
-- outcomes are left out of the batch and written later. The rest of the transaction then
-- updates only rows it has locked, so it waits on no one.
-- $1 ids, $2 attempts.
--
-- Index: jobs_pkey, one probe per input row to lock it and one to find the held ones. The
-- state is tested as text for the reason job_complete_many.sql gives. Only a batch whose
-- bounded first try timed out on a row lock comes here, so this is off the hot path.
-- Locks: taken in job id order; SKIP LOCKED never waits, so the order only keeps this
-- statement's locks in the order every other statement over many jobs takes them.
WITH lease AS (
    SELECT * FROM unnest($1::uuid[], $2::integer[]) AS f(id, attempt)
),
locked AS MATERIALIZED (
    SELECT k.id
    FROM hopper.jobs AS k, lease AS f
    WHERE k.id = f.id
      AND k.attempt = f.attempt
      AND k.state::text = 'running'
    ORDER BY k.id
    FOR NO KEY UPDATE OF k SKIP LOCKED
)
SELECT h.id, h.attempt
FROM hopper.jobs AS h, lease AS f
WHERE h.id = f.id
  AND h.attempt = f.attempt
  AND h.state::text = 'running'
  AND h.id NOT IN (SELECT l.id FROM locked AS l)
