-- Completes many attempts in one statement. A row is touched only while it is still
-- running under the given attempt (the fencing check); the (id, attempt) pairs returned
-- are the leases that were honoured, every other one was lost.
-- $1 ids, $2 attempts, $3 durations (ms), $4 now.
UPDATE hopper.jobs AS j
SET state = 'completed',
    finished_at = coalesce($4::timestamptz, now()),
    duration_ms = f.duration_ms,
    lease_expires_at = NULL
FROM unnest($1::uuid[], $2::integer[], $3::bigint[]) AS f(id, attempt, duration_ms)
WHERE j.id = f.id
  AND j.attempt = f.attempt
  AND j.state = 'running'
RETURNING j.id, j.attempt
