-- Takes back jobs whose lease expired: the worker vanished or hung. The attempt counts as
-- failed (reason recorded); the job runs again at once, or is dead-lettered if that was its
-- last attempt. Index: jobs_running_idx (lease_expires_at) WHERE running.
-- A job whose row another transaction held at its last renewal has that renewal in
-- held_leases (job_extend_many.sql): left alone while the note is current. Notes past
-- their time are deleted here (the table holds only the few rows held at a renewal).
-- $1 now.
WITH expired AS (
    SELECT j.id
    FROM hopper.jobs AS j
    WHERE j.state = 'running'
      AND j.lease_expires_at < coalesce($1::timestamptz, now())
      AND NOT EXISTS (
          SELECT 1
          FROM hopper.held_leases AS n
          WHERE n.job_id = j.id
            AND n.attempt = j.attempt
            AND n.expires_at >= coalesce($1::timestamptz, now())
      )
    ORDER BY j.lease_expires_at
    LIMIT 1000
    FOR UPDATE OF j SKIP LOCKED
),
forgotten AS (
    DELETE FROM hopper.held_leases
    WHERE expires_at < coalesce($1::timestamptz, now())
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
