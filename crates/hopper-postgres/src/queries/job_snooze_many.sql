-- Puts attempts back without counting them: snoozed jobs wait $3 ms, released ones
-- (graceful shutdown) are available at once.
-- $1 ids, $2 attempts, $3 delays (ms), $4 now.
UPDATE hopper.jobs AS j
SET state = CASE WHEN f.retry_ms > 0 THEN 'scheduled' ELSE 'available' END::hopper.job_state,
    run_at = coalesce($4::timestamptz, now()) + make_interval(secs => f.retry_ms / 1000.0),
    uncounted = j.uncounted + 1,
    lease_expires_at = NULL
FROM unnest($1::uuid[], $2::integer[], $3::bigint[]) AS f(id, attempt, retry_ms)
WHERE j.id = f.id
  AND j.attempt = f.attempt
  AND j.state = 'running'
RETURNING j.id, j.state::text, j.queue, j.attempt
