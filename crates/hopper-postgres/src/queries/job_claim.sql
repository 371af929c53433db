-- Claims up to $3 available jobs of queue $1 for node $2; each claim is a new attempt.
-- $4 lease in ms (the lease is min(job timeout, $4)), $5 now (NULL: the database's clock).
--
-- Index: jobs_claim_idx (queue, priority, run_at, id) WHERE state = 'available'. The inner
-- SELECT walks that index from its start for one queue and stops after $3 unlocked rows, so
-- its cost depends on the batch size, not on the backlog: scheduled, running and finished
-- jobs are not in the index at all. SKIP LOCKED lets concurrent claimers pass each other's
-- rows instead of queueing behind them.
--
-- The claimed rows leave the partial index (state changes), so the next claim does not
-- step over them; their dead index entries are cleaned by index-tuple killing and vacuum.
WITH picked AS (
    SELECT id
    FROM hopper.jobs
    WHERE state = 'available'
      AND queue = $1
    ORDER BY priority, run_at, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE hopper.jobs AS j
SET state = 'running',
    attempt = j.attempt + 1,
    node_id = $2,
    attempted_at = coalesce($5::timestamptz, now()),
    lease_expires_at = coalesce($5::timestamptz, now())
                       + make_interval(secs => least(j.timeout_ms, $4::integer) / 1000.0)
FROM picked
WHERE j.id = picked.id
RETURNING j.id, j.attempt, j.queue, j.kind, j.args, j.priority, j.attempt - j.uncounted,
          j.max_attempts, j.timeout_ms, j.created_at, j.run_at
