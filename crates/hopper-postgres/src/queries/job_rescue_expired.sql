-- Takes back jobs whose lease expired: the worker vanished or hung. The attempt counts as
-- failed (reason recorded); the job runs again at once, or is dead-lettered if that was its
-- last attempt. Index: jobs_running_idx (lease_expires_at) WHERE running, which holds the
-- NULLs too. A running row without a lease (written by hand: hopper never leaves one) is
-- taken back as expired, or it would hold its queue's concurrency for ever.
-- A job whose row another transaction held at its last renewal has that renewal in
-- held_leases (job_extend_many.sql): left alone while the note is current. Notes past
-- their time are deleted here (the table holds only the few rows held at a renewal).
-- $1 now, $2 most entries of an error history kept (job_fail_many.sql).
-- Attempts used are counted in bigint: a count written by hand at either end of integer
-- must not make the statement fail for every job it takes.
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
-- Apart from `expired`, so that each reads only its own entries of the index (one scan
-- with an OR of the two filtered every running job).
leaseless AS (
    SELECT j.id
    FROM hopper.jobs AS j
    WHERE j.state = 'running'
      AND j.lease_expires_at IS NULL
    LIMIT 1000
    FOR UPDATE OF j SKIP LOCKED
),
forgotten AS (
    DELETE FROM hopper.held_leases
    WHERE expires_at < coalesce($1::timestamptz, now())
),
rescued AS (
    UPDATE hopper.jobs AS j
    SET state = CASE WHEN j.attempt::bigint - j.uncounted >= j.max_attempts
                     THEN 'failed' ELSE 'available' END::hopper.job_state,
        finished_at = CASE WHEN j.attempt::bigint - j.uncounted >= j.max_attempts
                           THEN coalesce($1::timestamptz, now()) END,
        run_at = coalesce($1::timestamptz, now()),
        errors = hopper.error_history_pushed(j.errors, jsonb_build_object(
            'attempt', j.attempt,
            'at', coalesce($1::timestamptz, now()),
            'error', CASE WHEN j.lease_expires_at IS NULL
                          THEN 'running without a lease: taken back'
                          ELSE 'lease expired at ' || j.lease_expires_at
                               || ': the worker vanished or stopped heartbeating' END,
            'node', j.node_id,
            'duration_ms', NULL), $2),
        lease_expires_at = NULL
    FROM (SELECT id FROM expired UNION ALL SELECT id FROM leaseless) AS taken
    WHERE j.id = taken.id
    RETURNING j.queue, j.state
),
woken AS (
    SELECT pg_notify('hopper_wake', 'a:' || queue)
    FROM (SELECT DISTINCT queue FROM rescued WHERE state = 'available') AS q
)
SELECT (SELECT count(*) FROM rescued), (SELECT count(*) FROM woken)
