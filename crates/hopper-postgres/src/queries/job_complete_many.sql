-- Completes many attempts in one statement. A row is touched only while it is still
-- running under the given attempt (the fencing check); the (id, attempt) pairs returned
-- are the leases that were honoured, every other one was lost.
-- $1 ids, $2 attempts, $3 durations (ms), $4 now.
--
-- Index: jobs_pkey, one probe per input row. The state is tested as text on purpose:
-- `j.state = 'running'` matches the partial index jobs_running_idx, whose row estimate is
-- often 1 (statistics taken while nothing ran); the planner then loops over every running
-- job and rescans the whole input for each, O(running x batch): measured 0.6-8 s for a
-- batch of 1,000 with 3,000 jobs running. As text, only the primary key fits.
-- Locks: rows are locked in the order of the input, which the caller sorts by id, as it
-- does for the lease extensions; two statements over the same rows then never deadlock. The
-- runtime's batches run with a generic plan (outcomes.rs, `finish_pooled`): a custom plan,
-- knowing the batch is 1,000 rows, hashed a sequential scan of the whole table instead.
UPDATE hopper.jobs AS j
SET state = 'completed',
    finished_at = coalesce($4::timestamptz, now()),
    duration_ms = f.duration_ms,
    lease_expires_at = NULL
FROM unnest($1::uuid[], $2::integer[], $3::bigint[]) AS f(id, attempt, duration_ms)
WHERE j.id = f.id
  AND j.attempt = f.attempt
  AND j.state::text = 'running'
RETURNING j.id, j.attempt
