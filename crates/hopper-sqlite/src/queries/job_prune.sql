-- Statement 1: retention. Deletes up to :limit finished jobs whose retention ran out,
-- oldest first: completed and cancelled ones that finished before :done_before, failed
-- ones before :failed_before.
--
-- Which index: the primary key, and no other (an index on finished_at would cost every
-- completion an index update, on the hot path, for a background task). Ids are UUIDv7,
-- ordered by creation time, and a job cannot finish before it was created: every job that
-- finished before the later cutoff has an id below :below_id, the smallest UUIDv7 of that
-- cutoff's millisecond (as text: hyphenated lowercase hex sorts like the 16 bytes). The
-- subquery range-scans the primary key below it and above :after (the greatest id the
-- previous batch of the pass deleted; '' to start a pass), oldest first, checks state and
-- finished_at on each row, and stops after :limit matches. A batch reads its :limit rows
-- plus the rows it keeps between :after and its last match (failed jobs within their
-- longer retention, scheduled or running jobs, finished ones within their unique window);
-- as each batch starts past the last one's last match, a pass reads every row below the
-- cutoff once. The one exception: a row kept by one pass is read again by the next pass.
--
-- A finished job whose unique window has not ended by :now (unique_until, migration 0006)
-- is kept: its key stays taken for the rest of the window (docs/scheduling.md), and
-- deleting it would let a second job of the key in. A condition on the row, like the
-- others.
--
-- One node at a time: the statement runs in a `BEGIN IMMEDIATE` transaction, which holds
-- the database's only write lock.
DELETE FROM hopper_jobs
WHERE id IN (
    SELECT id
    FROM hopper_jobs
    WHERE id < :below_id
      AND id > :after
      AND (   (state IN ('completed', 'cancelled') AND finished_at < :done_before)
           OR (state = 'failed' AND finished_at < :failed_before))
      AND (unique_until IS NULL OR unique_until <= :now)
    ORDER BY id
    LIMIT :limit
)
RETURNING state, id;

-- Statement 2: the dry run. Counts every job statement 1 would delete (all of them, not
-- one batch), with the same bounds and the same range scan.
SELECT count(*) FILTER (WHERE state = 'completed' AND finished_at < :done_before),
       count(*) FILTER (WHERE state = 'cancelled' AND finished_at < :done_before),
       count(*) FILTER (WHERE state = 'failed' AND finished_at < :failed_before)
FROM hopper_jobs
WHERE id < :below_id
  AND state IN ('completed', 'cancelled', 'failed')
  AND (unique_until IS NULL OR unique_until <= :now);
