-- Puts attempts back without counting them: snoozed jobs wait $3 ms, released ones
-- (graceful shutdown) are available at once.
-- $1 ids, $2 attempts, $3 delays (ms), $4 now.
--
-- Index: jobs_pkey, one probe per input row. The state is tested as text on purpose:
-- `j.state = 'running'` matches the partial index jobs_running_idx, whose row estimate is
-- often 1 (statistics taken while nothing ran); the planner then loops over every running
-- job and rescans the whole input for each, O(running x batch): measured 0.6-8 s for a
-- batch of 1,000 with 3,000 jobs running. As text, only the primary key fits.
--
-- Jobs that became available at once wake their queues' idle workers (sent at commit,
-- once per queue), as every other path to `available` does.
WITH finished AS (
    UPDATE hopper.jobs AS j
    SET state = CASE WHEN f.retry_ms > 0 THEN 'scheduled' ELSE 'available' END::hopper.job_state,
        run_at = coalesce($4::timestamptz, now()) + make_interval(secs => f.retry_ms / 1000.0),
        uncounted = j.uncounted + 1,
        lease_expires_at = NULL
    FROM unnest($1::uuid[], $2::integer[], $3::bigint[]) AS f(id, attempt, retry_ms)
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
