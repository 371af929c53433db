-- Claims from a limited queue without groups, inside the transaction that holds the
-- queue's settings row (queue_lock.sql), in the plain order (priority, run_at, id) over
-- jobs_claim_idx, as job_claim.sql does.
-- $1 queue, $2 node, $3 most jobs (the caller's free slots, already capped by the rate
-- bucket), $4 lease ms, $5 now, $6 tokens left after this claim's refill (NULL: no rate
-- limit; the claimed jobs are taken off), $7 refill instant, $8 only jobs of these kinds
-- (NULL: every kind).
--
-- The limits are read from the settings row itself, which this transaction holds: the
-- statement may be sent before the lock was granted (pipelined behind queue_lock.sql, one
-- round trip), and its snapshot, taken when it starts, after the grant, sees the row as
-- the lock left it. A paused queue, a missing row, or a rate limit the caller did not
-- pass tokens for (its settings cache was stale) claim nothing; the caller looks at the
-- locked row and tries again with the bucket.
--
-- The running count reads jobs_running_idx (only running jobs are in it) and filters by
-- queue: its cost is the number of running jobs, not the backlog. Every row carries the
-- running count (before this claim) first, so the caller knows whether the concurrency
-- limit cut the claim short; when nothing was claimed, one row comes back with NULL job
-- columns. Columns 2, 3 and 4 (next cursor, rows locked but not claimed, groups that may
-- have more) are NULL, 0 and NULL here; they match job_claim_fair.sql.
--
-- Figures: a limited drain runs at 0.9-1.0 of the plain one (scripts/bench_scheduling.sh);
-- every variant tried and its measurements are in docs/benchmarks.md ("Claim strategies
-- measured").
--
-- A count written by hand past what a lease can count stops nothing: the attempt is raised
-- at most to 2147483647 (`least`: `+ 1` past it would make the whole statement fail, and
-- with it every claim of the queue), and attempts used are returned as bigint (an
-- `uncounted` at either end of integer overflows a 32-bit difference); the caller fails
-- such a job as unreadable (scheduling.rs, `claimed_job`).
WITH settings AS (
    SELECT max_running,
           CASE WHEN paused OR (rate_limit IS NOT NULL AND $6::float8 IS NULL) THEN 0
                ELSE $3::bigint END AS most
    FROM hopper.queues
    WHERE name = $1
),
running AS (
    SELECT count(*) AS n
    FROM hopper.jobs
    WHERE state = 'running'
      AND queue = $1
      AND (SELECT max_running FROM settings) IS NOT NULL
),
-- The scan's LIMIT is the plain parameter $3, so the planner sees a small ordered scan of
-- jobs_claim_idx (a LIMIT computed by a subquery is unknown at planning time and was
-- planned as a sort of the whole backlog). The concurrency cap is applied to those rows
-- afterwards; rows locked but not claimed are unlocked at commit, and no other claimer of
-- this queue runs meanwhile (they wait for the settings row).
-- $8 (hopper serve, when every worker with room in the queue declared the kinds it runs) is
-- checked on each entry's heap row, as in job_claim.sql: `kind` is not in jobs_claim_idx,
-- so jobs of other kinds are stepped over, untouched, and the scan stops after $3 rows of
-- the asked kinds (a backlog of other kinds at the head costs a heap visit each, per
-- claim; an index on kind would cost every insert and claim a third entry). The running
-- count is every kind's: the concurrency limit is the queue's.
-- The UPDATE finds the picked rows by `id = ANY (ARRAY(…))`, a primary-key probe per row
-- whatever the estimates: as a join, the generic plan (see LIMITED_CLAIM in scheduling.rs)
-- guessed hundreds of rows and hashed a sequential scan of the whole table.
picked AS (
    SELECT id
    FROM (
        SELECT id
        FROM hopper.jobs
        WHERE state = 'available'
          AND hashtextextended(queue, 0) = hashtextextended($1, 0)
          AND queue = $1
          AND ($8::text[] IS NULL OR kind = ANY ($8::text[]))
        ORDER BY priority, run_at, id
        LIMIT $3
        FOR UPDATE SKIP LOCKED
    ) AS head
    LIMIT greatest(0, least(coalesce((SELECT most FROM settings), 0),
                            coalesce((SELECT max_running FROM settings) - (SELECT n FROM running),
                                     $3)))
),
claimed AS (
    UPDATE hopper.jobs AS j
    SET state = 'running',
        attempt = least(j.attempt, 2147483646) + 1,
        node_id = $2,
        attempted_at = coalesce($5::timestamptz, now()),
        lease_expires_at = coalesce($5::timestamptz, now())
                           + make_interval(secs => least(j.timeout_ms, $4::integer) / 1000.0)
    WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING j.id, j.attempt, j.queue, j.kind, j.args, j.priority, j.attempt::bigint - j.uncounted,
              j.max_attempts, j.timeout_ms, j.created_at, j.run_at, j.meta
),
bucket AS (
    UPDATE hopper.queues
    SET rate_tokens = $6::float8 - (SELECT count(*) FROM claimed),
        rate_refilled_at = $7::timestamptz
    WHERE name = $1
      AND $6::float8 IS NOT NULL
)
SELECT (SELECT n FROM running), NULL::text AS cursor, 0::bigint AS unpicked,
       NULL::text[] AS more, c.*
FROM (VALUES (1)) AS one
LEFT JOIN claimed AS c ON true
