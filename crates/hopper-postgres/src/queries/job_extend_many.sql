-- Heartbeat: moves the leases still held to $3 ms from now. Returns the ids kept.
-- $1 ids, $2 attempts, $3 lease (ms), $4 now.
UPDATE hopper.jobs AS j
SET lease_expires_at = coalesce($4::timestamptz, now()) + make_interval(secs => $3::bigint / 1000.0)
FROM unnest($1::uuid[], $2::integer[]) AS f(id, attempt)
WHERE j.id = f.id
  AND j.attempt = f.attempt
  AND j.state = 'running'
RETURNING j.id
