-- Releases at once every job held by nodes whose heartbeat stopped more than $1 ms ago, and
-- forgets those nodes (seed 004's node lock key). Each release counts as a failed attempt.
-- $1 dead after (ms), $2 now.
WITH dead AS (
    DELETE FROM hopper.nodes
    WHERE heartbeat_at < coalesce($2::timestamptz, now()) - make_interval(secs => $1::bigint / 1000.0)
    RETURNING id
),
released AS (
    UPDATE hopper.jobs AS j
    SET state = CASE WHEN j.attempt - j.uncounted >= j.max_attempts
                     THEN 'failed' ELSE 'available' END::hopper.job_state,
        finished_at = CASE WHEN j.attempt - j.uncounted >= j.max_attempts
                           THEN coalesce($2::timestamptz, now()) END,
        run_at = coalesce($2::timestamptz, now()),
        errors = j.errors || jsonb_build_object(
            'attempt', j.attempt,
            'at', coalesce($2::timestamptz, now()),
            'error', 'node ' || j.node_id || ' stopped heartbeating',
            'node', j.node_id,
            'duration_ms', NULL),
        lease_expires_at = NULL
    FROM dead
    WHERE j.state = 'running'
      AND j.node_id = dead.id
    RETURNING j.queue, j.state
),
woken AS (
    SELECT pg_notify('hopper_wake', 'a:' || queue)
    FROM (SELECT DISTINCT queue FROM released WHERE state = 'available') AS q
)
SELECT (SELECT count(*) FROM released), (SELECT count(*) FROM woken)
