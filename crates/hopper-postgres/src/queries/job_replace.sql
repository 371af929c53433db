-- The 'replace' unique policy: updates the job holding a key with a new job's fields, if
-- it is still waiting. A job claimed meanwhile is re-checked after its row lock is
-- granted (state is no longer waiting) and left alone. The queue and the id stay.
-- $1 holder id, $2 kind, $3 args, $4 priority, $5 run_at (NULL: now), $6 max_attempts,
-- $7 timeout_ms, $8 group, $9 now (NULL: the database's clock), $10 meta (the new job's
-- metadata replaces the holder's, like its arguments).
WITH replaced AS (
    UPDATE hopper.jobs
    SET kind = $2,
        args = $3,
        priority = $4,
        run_at = coalesce($5::timestamptz, $9::timestamptz, now()),
        state = CASE WHEN $5::timestamptz > coalesce($9::timestamptz, now())
                     THEN 'scheduled' ELSE 'available' END::hopper.job_state,
        max_attempts = $6,
        timeout_ms = $7,
        group_key = coalesce($8::text, group_key),
        meta = $10
    WHERE id = $1
      AND state IN ('scheduled', 'available')
    RETURNING id, state, queue
)
SELECT id, pg_notify('hopper_wake', 'a:' || queue) IS NULL
FROM replaced
