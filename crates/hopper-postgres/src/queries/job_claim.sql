-- Claims up to $3 available jobs of queue $1 for node $2; each claim is a new attempt.
-- $4 lease in ms (the lease is min(job timeout, $4)), $5 now (NULL: the database's clock).
-- $6, $7, $8: where to start, a key (priority, run_at, id) of jobs_claim_idx; only jobs
-- sorting after it are read. NULL (all three): from the head of the index. The head's
-- stand-in (-32768, -infinity, the nil uuid) is below every key hopper writes (ids are
-- UUIDv7, never nil). The last two columns say when the row was written and when the
-- statement started, by the database's own clock: cursor.rs uses the difference to tell a
-- slow walk of the index head (dead entries, see below) from a slow commit or a busy
-- client. (Two timestamps, not their difference in ms: `extract` makes a numeric per row.)
--
-- Index: jobs_claim_idx (queue, priority, run_at, id) WHERE state = 'available'. The inner
-- SELECT walks that index from its start for one queue and stops after $3 unlocked rows, so
-- its cost depends on the batch size, not on the backlog: scheduled, running and finished
-- jobs are not in the index at all. SKIP LOCKED lets concurrent claimers pass each other's
-- rows instead of queueing behind them.
--
-- The claimed rows leave the partial index (state changes), so the next claim does not
-- step over them; their dead index entries are cleaned by index-tuple killing and vacuum.
--
-- Strategies measured with `hopper bench --workload drain` (W3: 100,000 no-op jobs, one
-- runtime, concurrency 50) on a shared, loaded 2-core machine; PostgreSQL's own limits in
-- the same runs were L3 17-33k and L2 34-43k rows/s (docs/benchmarks.md):
--   - claim exactly the free slots (<= 50 per claim), outcomes batched by the completer:
--     769 jobs/s, then 2,556 once the outcome statements stopped using jobs_running_idx
--     (a nested rescan of the batch per running job: 2,421 ms -> 69 ms per 1,000 outcomes);
--   - the same, alternated in one run with the next: 2,961 / 2,570 jobs/s;
--   - prefetch (runtime/prefetch.rs): up to free slots + concurrency per claim, jobs on
--     hand started while the next claim is in flight: 4,088 / 3,715 jobs/s (+38% / +45%);
--     3 repetitions beside the limits: 5,929 median (0.23 x L3, 0.14 x L2).
-- The drain is bound by WAL flushes (WALWrite / WALSync waits dominate both this statement
-- and the completion), not by this statement's plan (0.3 ms of index work for 50 rows):
-- what helps is fewer commits per job, or more of them at once.
-- 2026-11-22, session 2 (same method, 30,000 jobs per run, fresh schema, interleaved
-- rounds on a machine at load 6-8; jobs/s):
--   - one claim in flight, prefetch = concurrency (before): 6,419 / 6,330;
--   - two claims in flight (runtime/prefetch.rs): 8,435 / 8,815 / 9,624 / 9,899 (+35-50%);
--   - three in flight, prefetch 100: 10,929 / 16,034; four, prefetch 150: 15,306 /
--     17,158 / 13,920 / 7,748 -> the defaults are now four claims in flight and a prefetch
--     of twice the concurrency; six or eight in flight with prefetch 250-400 measured no
--     better (10,081-11,954);
--   - LOST: writing the outcomes waiting for the completer in the next claim's
--     transaction (one commit for both, statements pipelined): 5,779 / 8,055 against
--     8,435 / 8,815 without, and 12,124 / 11,406 against 10,929 / 16,034 with three in
--     flight. The combined transaction holds the claim's row locks and the connection
--     longer, while separate commits already share WAL flushes (group commit).
--   - pgbench on hopper's own table and statements (4 clients, claim 100 then complete)
--     reaches 0.75 of L3 measured in the same minute; claim + complete in one statement
--     0.80: the schema costs about a quarter, the rest of the gap is the runtime's.
--   - NOT TAKEN (pgbench, this claim + job_complete_many.sql, 4 clients, 400k rows,
--     alternated 3 times): fillfactor 70 on jobs, 95 / 91 / 84 tps against 106 / 91 / 75
--     at 100; completing by DELETE instead of UPDATE, 105 / 76 / 79 tps against 106 / 91 /
--     75. Neither moves the figure beyond the noise: the claim's UPDATE (a new row version
--     and its index entries; never HOT, since state is in every partial index's
--     predicate) is the cost, and the runtime's process uses about 10% of one core.
WITH picked AS (
    SELECT id
    FROM hopper.jobs
    WHERE state = 'available'
      AND queue = $1
      AND (priority, run_at, id) > (coalesce($6::smallint, (-32768)::smallint),
                                    coalesce($7::timestamptz, '-infinity'::timestamptz),
                                    coalesce($8::uuid, '00000000-0000-0000-0000-000000000000'))
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
          j.max_attempts, j.timeout_ms, j.created_at, j.run_at,
          clock_timestamp(), statement_timestamp()
