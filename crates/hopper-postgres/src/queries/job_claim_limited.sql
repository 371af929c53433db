-- Claims from a limited queue without groups, inside the transaction that holds the
-- queue's settings row (queue_lock.sql), in the plain order (priority, run_at, id) over
-- jobs_claim_idx, as job_claim.sql does.
-- $1 queue, $2 node, $3 most jobs (the caller's free slots, already capped by the rate
-- bucket), $4 lease ms, $5 now, $6 max_running (NULL: none), $7 tokens left after this
-- claim's refill (NULL: no rate limit; the claimed jobs are taken off), $8 refill instant.
--
-- The running count reads jobs_running_idx (only running jobs are in it) and filters by
-- queue: its cost is the number of running jobs, not the backlog. Every row carries the
-- running count (before this claim) first, so the caller knows whether the concurrency
-- limit cut the claim short; when nothing was claimed, one row comes back with NULL job
-- columns. Columns 2 and 3 (turn, group) are NULL here; they match job_claim_fair.sql.
WITH running AS (
    SELECT count(*) AS n
    FROM hopper.jobs
    WHERE state = 'running'
      AND queue = $1
      AND $6::integer IS NOT NULL
),
picked AS (
    SELECT id
    FROM hopper.jobs
    WHERE state = 'available'
      AND queue = $1
    ORDER BY priority, run_at, id
    LIMIT greatest(0, least($3, coalesce($6::integer - (SELECT n FROM running), $3)))
    FOR UPDATE SKIP LOCKED
),
claimed AS (
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
),
bucket AS (
    UPDATE hopper.queues
    SET rate_tokens = $7::float8 - (SELECT count(*) FROM claimed),
        rate_refilled_at = $8::timestamptz
    WHERE name = $1
      AND $7::float8 IS NOT NULL
)
SELECT (SELECT n FROM running), NULL::bigint AS turn, NULL::text AS group_key, c.*
FROM (VALUES (1)) AS one
LEFT JOIN claimed AS c ON true
