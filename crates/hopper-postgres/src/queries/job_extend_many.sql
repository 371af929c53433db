-- Heartbeat: moves the leases still held to $3 ms from now. Returns the ids kept.
-- $1 ids, $2 attempts, $3 lease (ms), $4 now.
--
-- Index: jobs_pkey, one probe per input row. The state is tested as text on purpose:
-- `j.state = 'running'` matches the partial index jobs_running_idx, whose row estimate is
-- often 1 (statistics taken while nothing ran); the planner then loops over every running
-- job and rescans the whole input for each, O(running x batch): measured 0.6-8 s for a
-- batch of 1,000 with 3,000 jobs running. As text, only the primary key fits.
-- Locks: rows are locked in the order of the input, which the caller sorts by id, as it
-- does for the outcomes; two statements over the same rows then never deadlock.
UPDATE hopper.jobs AS j
SET lease_expires_at = coalesce($4::timestamptz, now()) + make_interval(secs => $3::bigint / 1000.0)
FROM unnest($1::uuid[], $2::integer[]) AS f(id, attempt)
WHERE j.id = f.id
  AND j.attempt = f.attempt
  AND j.state::text = 'running'
RETURNING j.id
