-- Records failed attempts. A failure is retried after its delay unless it is permanent or
-- the job has used all its attempts, in which case the job is dead-lettered ('failed').
-- Every failure is appended to the job's error history, which keeps the latest $8
-- (hopper.error_history_pushed, migration 0016).
-- $1 ids, $2 attempts, $3 errors, $4 retry delays (ms), $5 permanent, $6 durations (ms),
-- $7 now, $8 most entries of an error history kept (hopper_core::limits::MAX_ERROR_HISTORY).
--
-- Index: jobs_pkey, one probe per input row. The state is tested as text on purpose:
-- `j.state = 'running'` matches the partial index jobs_running_idx, whose row estimate is
-- often 1 (statistics taken while nothing ran); the planner then loops over every running
-- job and rescans the whole input for each, O(running x batch): measured 0.6-8 s for a
-- batch of 1,000 with 3,000 jobs running. As text, only the primary key fits.
--
-- Jobs that became available at once wake their queues' idle workers (sent at commit,
-- once per queue), as every other path to `available` does.
-- Attempts used are counted in bigint: a count written by hand at either end of integer
-- must not make the statement fail for every job it takes.
WITH finished AS (
    UPDATE hopper.jobs AS j
    SET state = CASE
            WHEN f.permanent OR j.attempt::bigint - j.uncounted >= j.max_attempts THEN 'failed'
            WHEN f.retry_ms > 0 THEN 'scheduled'
            ELSE 'available'
        END::hopper.job_state,
        run_at = CASE
            WHEN f.permanent OR j.attempt::bigint - j.uncounted >= j.max_attempts THEN j.run_at
            ELSE coalesce($7::timestamptz, now()) + make_interval(secs => f.retry_ms / 1000.0)
        END,
        finished_at = CASE
            WHEN f.permanent OR j.attempt::bigint - j.uncounted >= j.max_attempts
            THEN coalesce($7::timestamptz, now())
        END,
        lease_expires_at = NULL,
        errors = hopper.error_history_pushed(j.errors, jsonb_build_object(
            'attempt', j.attempt,
            'at', coalesce($7::timestamptz, now()),
            'error', f.error,
            'node', j.node_id,
            'duration_ms', f.duration_ms), $8)
    FROM unnest($1::uuid[], $2::integer[], $3::text[], $4::bigint[], $5::boolean[], $6::bigint[])
         AS f(id, attempt, error, retry_ms, permanent, duration_ms)
    WHERE j.id = f.id
      AND j.attempt = f.attempt
      AND j.state::text = 'running'
    RETURNING j.id, j.state, j.queue, j.attempt
),
woken AS (
    SELECT pg_notify('hopper_wake', 'a:' || queue)
    FROM (SELECT DISTINCT queue FROM finished WHERE state = 'available') AS q
)
SELECT done.id, done.state::text, done.queue, done.attempt
FROM finished AS done, (SELECT count(*) FROM woken) AS w
