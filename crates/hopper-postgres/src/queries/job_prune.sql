-- Retention: deletes up to $3 finished jobs whose retention ran out, oldest first.
-- $1 retention of completed and cancelled jobs (ms), $2 retention of failed jobs (ms),
-- $3 most rows, $4 now, $5 the greatest id the previous batch of the pass deleted (NULL to
-- start a pass).
--
-- Which index: the primary key, and no other. There is deliberately no index on
-- finished_at: every completion would have to update it, on the hot path, for the sake of
-- a background task. Instead, ids are UUIDv7 and so ordered by creation time, and a job
-- cannot finish before it was created: every job that finished before a cutoff has an id
-- below the smallest UUIDv7 of the cutoff's millisecond. A range scan of the primary key
-- below that id and above $5, oldest first, reads the candidates; state and finished_at
-- are checked on each row. The scan stops after $3 matches, so a batch reads its $3 rows
-- plus the rows it keeps between $5 and its last match (failed jobs within their longer
-- retention, scheduled or running jobs, finished ones within their unique window); as
-- each batch starts past the last one's last match, a pass reads every row below the
-- cutoff once. The one exception: a row kept by one pass is read again by the next pass.
--
-- A job whose id is later than its creation (an id chosen by the client with a clock
-- ahead) is pruned once the cutoff passes its id's time: late, never early.
--
-- One node at a time: the statement takes a transaction-level advisory lock (the key is
-- per schema: the text below is bound like every other schema name); when another node
-- holds it, nothing is read and the first column is false. Rows are taken FOR UPDATE
-- SKIP LOCKED, so a job being retried or deleted at the same moment is left alone (and
-- its state is checked again after the lock, so a job retried just before is kept).
--
-- A finished job whose unique window has not ended (unique_until, migration 0015) is kept:
-- its key stays taken for the rest of the window (docs/scheduling.md), and deleting it
-- would let a second job of the key in. A condition on the row, like the others.
WITH elected AS (
    SELECT pg_try_advisory_xact_lock(hashtextextended('hopper.job_prune', 0)) AS held
),
cutoff AS (
    SELECT coalesce($4::timestamptz, now()) AS now,
           coalesce($4::timestamptz, now()) - make_interval(secs => $1::bigint / 1000.0) AS done_before,
           coalesce($4::timestamptz, now()) - make_interval(secs => $2::bigint / 1000.0) AS failed_before
),
bound AS (
    -- The smallest UUIDv7 of the later cutoff's millisecond: 48 bits of Unix ms, then zeros.
    SELECT now,
           done_before,
           failed_before,
           (lpad(to_hex(floor(extract(epoch FROM greatest(done_before, failed_before)) * 1000)::bigint), 12, '0')
            || '00000000000000000000')::uuid AS below_id
    FROM cutoff
),
doomed AS (
    SELECT j.id
    FROM hopper.jobs AS j, bound AS b
    WHERE (SELECT held FROM elected)
      AND j.id < b.below_id
      AND j.id > coalesce($5::uuid, '00000000-0000-0000-0000-000000000000')
      AND (   (j.state IN ('completed', 'cancelled') AND j.finished_at < b.done_before)
           OR (j.state = 'failed' AND j.finished_at < b.failed_before))
      AND (j.unique_until IS NULL OR j.unique_until <= b.now)
    ORDER BY j.id
    LIMIT $3
    FOR UPDATE OF j SKIP LOCKED
),
deleted AS (
    DELETE FROM hopper.jobs AS j
    USING doomed
    WHERE j.id = doomed.id
    RETURNING j.id, j.state
)
SELECT (SELECT held FROM elected),
       count(*) FILTER (WHERE state = 'completed'),
       count(*) FILTER (WHERE state = 'cancelled'),
       count(*) FILTER (WHERE state = 'failed'),
       (SELECT id FROM deleted ORDER BY id DESC LIMIT 1)
FROM deleted
