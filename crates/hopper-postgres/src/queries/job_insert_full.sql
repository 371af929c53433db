-- One job with a group or a unique key (plain jobs use job_insert.sql). Inserts nothing
-- when the unique key is taken (ON CONFLICT DO NOTHING: a concurrent inserter of the same
-- key waits for the first one's transaction, then does nothing, so exactly one wins; no
-- error aborts the caller's transaction). Returns whether it inserted.
-- $1 id, $2 queue, $3 kind, $4 args, $5 priority, $6 run_at (NULL: now), $7 max_attempts,
-- $8 timeout_ms, $9 now (NULL: the database's clock), $10 group, $11 unique key,
-- $12 unique window start, $13 meta, $14 unique window end (kept by pruning until then).
-- A job without a group in a queue that has groups joins the "no group" group ''.
WITH inserted AS (
    INSERT INTO hopper.jobs (id, queue, kind, args, state, priority, run_at, max_attempts,
                             timeout_ms, group_key, unique_key, unique_window, meta,
                             unique_until)
    VALUES (
        $1, $2, $3, $4,
        CASE WHEN $6::timestamptz > coalesce($9::timestamptz, now())
             THEN 'scheduled' ELSE 'available' END::hopper.job_state,
        $5, coalesce($6::timestamptz, $9::timestamptz, now()), $7, $8,
        coalesce($10::text, (SELECT '' FROM hopper.queues WHERE name = $2 AND grouped)),
        $11, $12, $13, $14
    )
    ON CONFLICT DO NOTHING
    RETURNING state, queue
),
woken AS (
    SELECT pg_notify('hopper_wake', 'a:' || queue)
    FROM inserted
    WHERE state = 'available'
)
SELECT (SELECT count(*) FROM inserted), (SELECT count(*) FROM woken)
