-- Takes back jobs whose lease expired: the worker vanished or hung. The attempt counts as
-- failed (reason recorded); the job runs again at once, or is dead-lettered if that was its
-- last attempt. Index: jobs_running_idx (lease_expires_at) WHERE running.
-- $1 now.
WITH expired AS (
    SELECT id
    FROM hopper.jobs
    WHERE state = 'running'
      AND lease_expires_at < coalesce($1::timestamptz, now())
    ORDER BY lease_expires_at
    LIMIT 1000
    FOR UPDATE SKIP LOCKED
),
rescued AS (
    UPDATE hopper.jobs AS j
    SET state = CASE WHEN j.attempt - j.uncounted >= j.max_attempts
                     THEN 'failed' ELSE 'available' END::hopper.job_state,
        finished_at = CASE WHEN j.attempt - j.uncounted >= j.max_attempts
                           THEN coalesce($1::timestamptz, now()) END,
        run_at = coalesce($1::timestamptz, now()),
        errors = j.errors || jsonb_build_object(
            'attempt', j.attempt,
            'at', coalesce($1::timestamptz, now()),
            'error', 'lease expired at ' || j.lease_expires_at || ': the worker vanished or stopped heartbeating',
            'node', j.node_id,
            'duration_ms', NULL),
        lease_expires_at = NULL
    FROM expired
    WHERE j.id = expired.id
    RETURNING j.queue, j.state
),
woken AS (
    SELECT pg_notify('hopper_wake', 'a:' || queue)
    FROM (SELECT DISTINCT queue FROM rescued WHERE state = 'available') AS q
)
SELECT (SELECT count(*) FROM rescued), (SELECT count(*) FROM woken)
