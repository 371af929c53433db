-- Claims from a limited queue without groups, inside the transaction that holds the
-- queue's settings row (queue_lock.sql), in the plain order (priority, run_at, id) over
-- jobs_claim_idx, as job_claim.sql does.
-- $1 queue, $2 node, $3 most jobs (the caller's free slots, already capped by the rate
-- bucket), $4 lease ms, $5 now, $6 tokens left after this claim's refill (NULL: no rate
-- limit; the claimed jobs are taken off), $7 refill instant.
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
-- Measured with scripts/bench_scheduling.sh (W3 drain, 20,000 no-op jobs, concurrency 50,
-- a limit of 10,000 that never binds, ratio to the plain queue in the same round; tables in
-- docs/benchmarks.md; this shared 2-core machine moves single rounds by up to 2x):
--   - one claim in flight per runtime, lock then claim (two round trips): 0.96-1.03
--     (medians); with the runtime's four claims in flight (6c82ef1) they queue on the
--     settings row, each holding it through its own commit's WAL flush: 0.55 / 0.49 / 0.40
--     / 0.33 (2026-11-24, load 2-4). Wait events sampled during such a drain: 116 of ~190
--     samples waiting for the row (Lock:tuple, Lock:transactionid), the holder mostly in
--     COMMIT (WALSync / WALWrite, 33).
--   - a process's concurrent claims of the queue combined into one (combine.rs: one
--     claim under way per queue and process, for what all the waiting asked): 0.51 / 0.70
--     (load 8-9);
--   - and no round trip while the lock is held: lock, this statement and COMMIT
--     pipelined, the limit read from the locked row here (above): 0.69 / 0.77, then over
--     8 rounds at 32a3efa median 0.69, sum of jobs/s 0.77 of plain (rounds 0.62-1.13);
--     with groups as well (job_claim_fair.sql behind the lock): before 0.31 / 0.44 / 0.32
--     / 0.28, now median 0.54, sum 0.62 (rounds 0.46-0.99).
--   - LOST: two combined claims under way per process, so that the next one already waits
--     for the lock in the database when the current one commits: limited 22,158 / 22,156
--     / 9,492 / 10,940 jobs/s against 22,339 / 25,664 / 8,626 / 11,433 with one, groups
--     and a limit 19,766 / 13,875 / 7,774 / 7,633 against 17,049 / 21,015 / 9,088 / 9,721
--     (alternated in one run).
--   - the claim's transaction committed asynchronously (synchronous_commit = off, so the
--     settings row is free once the commit record is written, not flushed), the combined
--     claim's turn passed to the next one at that COMMIT, and the jobs handed out only
--     after job_claim_flush.sql, a synchronous commit behind it, has flushed the WAL past
--     the claim (no job runs on a claim a crash could lose; see there). First measured
--     8 rounds after 8 of the tree before (2026-11-24 08:46 / 08:54, not alternated):
--     limited median 0.56 -> 1.00, with groups 0.49 -> 0.68; but alternated later the two
--     builds were close (09:34-09:38, 4 x 2 rounds each, plain, limited and both: limited
--     1.00 / 1.04 before / after at load 2-3, 1.07 / 0.86 with two pgbench sessions
--     committing inserts beside, both 0.86 / 0.87 and 0.86 / 0.60, the latter with the
--     grouped end-of-drain stall that 60a4031 and cd806c0 removed), so the first pair
--     mostly measured the machine. With every later change in place, the synchronous
--     commit put back alone (the flush statement made a SELECT 1; 09:40-09:42, 4 x 2
--     rounds alternated): limited 0.96 / 0.90 asynchronous / synchronous, both 0.69 /
--     0.66, with pgbench committing beside; 1.03 / 0.95 and 0.80 / 0.74 without (medians;
--     sums alike). Kept: a few percent, more when commits are slow.
--   - LOST again with the asynchronous commit: two combined claims under way per process
--     (combine.rs, the second waiting for the row in the database instead of a round trip
--     after the first's COMMIT), 4 x 2 rounds alternated with one (2026-11-24 09:12, load
--     4-5): limited median 0.90 against 1.00 with one, groups and a limit 0.67 against
--     0.76. The claims get smaller, and the row is busy anyway.
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
        attempt = j.attempt + 1,
        node_id = $2,
        attempted_at = coalesce($5::timestamptz, now()),
        lease_expires_at = coalesce($5::timestamptz, now())
                           + make_interval(secs => least(j.timeout_ms, $4::integer) / 1000.0)
    WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING j.id, j.attempt, j.queue, j.kind, j.args, j.priority, j.attempt - j.uncounted,
              j.max_attempts, j.timeout_ms, j.created_at, j.run_at
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
