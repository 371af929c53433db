-- One job, one statement, one round trip: the insert and its wake-up together.
-- $1 id, $2 queue, $3 kind, $4 args, $5 priority, $6 run_at (NULL: now), $7 max_attempts,
-- $8 timeout_ms, $9 now (NULL: the database's clock), $10 meta.
WITH inserted AS (
    INSERT INTO hopper.jobs (id, queue, kind, args, state, priority, run_at, max_attempts, timeout_ms,
                             meta)
    VALUES (
        $1, $2, $3, $4,
        CASE WHEN $6::timestamptz > coalesce($9::timestamptz, now())
             THEN 'scheduled' ELSE 'available' END::hopper.job_state,
        $5, coalesce($6::timestamptz, $9::timestamptz, now()), $7, $8, $10
    )
    RETURNING state, queue
)
SELECT pg_notify('hopper_wake', 'a:' || queue)
FROM inserted
WHERE state = 'available'
