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
-- Index: jobs_claim_idx (hashtextextended(queue, 0), priority, run_at, id) WHERE state =
-- 'available' (migration 0005 says why the hash). The inner SELECT walks that index from
-- its start for one queue and stops after $3 unlocked rows, so its cost depends on the batch size, not on the backlog: scheduled, running and finished
-- jobs are not in the index at all. SKIP LOCKED lets concurrent claimers pass each other's
-- rows instead of queueing behind them.
--
-- The claimed rows leave the partial index (state changes), so the next claim does not
-- step over them; their dead index entries are cleaned by index-tuple killing and vacuum.
-- Unless the xmin horizon is pinned (a transaction left open, a replication slot): then an
-- entry whose old row version the pinned snapshot can still see is neither removed nor
-- even marked LP_DEAD, and a claim from the head walks every entry claimed since the pin,
-- visiting the heap for each. Hence the bound ($6-$8): while head claims are slow,
-- cursor.rs passes the greatest key this process claimed, and the index scan starts there
-- (the queue's hash `= … AND ROW(priority, run_at, id) > ROW(...)` is one Index Cond; the btree
-- descends straight to it, also as a generic plan), with a head claim every second (or
-- five times the last one's duration) for jobs that sort before it. While head claims are
-- fast, every claim passes NULL and the order is exactly the head's.
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
-- Pinned xmin (docs/reliability.md; `hopper-chaos pinned-xmin`, private cluster with
-- default settings, 2026-11-24, 60 s before / 120 s pinned / 60 s after at 15,000 jobs/s,
-- 70% of W3 there; jobs run per second, pinned against before in the same run):
--   - from the head always (5bc7b6f): 2,075 / 14,650 = 14%, worst 10 s 1,119; the head
--     walk reached 10,000 pages / 120 ms and the backlog 1.6 million;
--   - after the cursor while head claims are slow (3 in a row >= 20 ms in the database), a
--     head claim every 1 s: 11,211 / 10,974 = 102% (the machine at load 8; before already
--     behind), but the head claims grew to 0.9 s each (40,000 pages): one backend walking
--     dead entries nearly all the time;
--   - the same, head claims at least 5x their duration apart (cursor.rs, taken): 15,322 /
--     14,252 = 108%, worst 10 s 14,933, backlog under 1,000 while pinned, recovered. Full
--     2/5/3-minute runs (docs/reliability.md): 97% at 15,000/s, 78% at 27,000/s (both
--     above what the machine sustained even before the pin), 100% (recovered: 98%) at
--     8,000/s.
--   - NOT BUILT: a rotating or partitioned hot table (jobs moved out of the claimed
--     partition, TRUNCATE instead of vacuum): it changes every statement and the insert
--     path, and the keyset bound already holds the rate, keeping one table and strict
--     order whenever the head is clean.
-- W3 with nothing pinned (100,000 jobs, fresh schema each, alternated; every W3 claim was
-- a head claim, none slow): 06:19 UTC (1b151ed), load 4-5, before 27,477 / 26,126 /
-- 25,761 / 23,194 / 26,403, after 24,049 / 26,006 / 24,468 / 23,327 / 25,608 (medians
-- 26,126 / 24,468); 07:00 UTC (cf4fb15), load 6.5-7.3, before 16,775 / 23,602 / 20,580 /
-- 23,153 / 17,457 / 18,310 / 18,569 / 18,887, after 17,382 / 14,319 / 16,209 / 22,737 /
-- 25,189 / 17,629 / 15,352 / 16,591 (medians 18,728 / 16,987). Before won 10 of the 13
-- pairs, by less than the spread of either; the read half alone (pgbench, 2 clients, 100,000 ready jobs, the select with
-- FOR UPDATE SKIP LOCKED rolled back, alternated) measured no cost for the bound: 3,677 /
-- 3,965 / 4,235 tps without it, 4,270 / 3,944 / 3,961 with the head's stand-in. Not
-- settled: repeat on a quiet machine.
-- 2026-11-24, session 4 (W3, 100,000 jobs, fresh schema each, alternated; jobs/s):
--   - the runtime's prefetch sized to the jobs' pace (hopper_core::pace: a full batch of
--     1,000 on hand for no-op jobs, two claims of 525 in flight) against the fixed twice
--     the concurrency, load 3: 40,309 / 43,292 / 48,255 against 32,883 / 31,338 / 31,392;
--   - LOST again, with large claims: every statement with synchronous_commit = off
--     (connection option), prefetch 500 and 2 in flight: 42,108 / 28,954 against 46,846 /
--     33,634; completing by DELETE instead of UPDATE (job_complete_many.sql), load 4-5:
--     29,230 / 32,449 / 28,809 against 29,640 / 23,383 / 24,812, inside the spread. The
--     drain is CPU-bound in PostgreSQL: in a system-wide profile the backends took 66% of
--     both cores and hopper's process 14% (its enqueue included), spread flat over heap
--     and btree code (no symbol above 3%); per job the claim locks and rewrites the row
--     and inserts into jobs_pkey and jobs_running_idx, and the outcome rewrites it and
--     inserts into jobs_pkey again.
-- 2026-11-24, session 5 (auto_explain on a database of its own during W3, statements of
-- 3 ms or more): the UPDATE found the picked rows by a join (`FROM picked WHERE j.id =
-- picked.id`), and a claim of about 1,000 was planned as a hash join over a sequential
-- scan of the whole table (37-40 ms on 100,000 jobs). It now finds them by
-- `id = ANY (ARRAY(…))`, a primary-key probe per row whatever the estimates, as the fair
-- and limited claims already did. pgbench, 100 claims of 1,000 in a row on a fresh table of
-- 100,000 jobs, 1 client, ms per claim: join 36.1 / 38.9, `id = ANY` 14.2 / 15.1, by ctid
-- 14.0 / 12.9 (within the noise of `id = ANY`; not taken). The outcome statements had the
-- same fault (hot.rs, `finish_pooled`). W3 with both, alternated, quiet: 53,481 / 54,862 /
-- 44,977 / 55,439 against 37,990 / 48,448 / 46,683 / 52,378.
--   - LOST: this claim pipelined between SET and RESET plan_cache_mode = force_generic_plan
--     (as the outcomes are), to spare its planning: 61,271 / 63,637 / 60,921 / 48,952
--     against 63,395 / 62,112 / 62,839 / 60,884 without, alternated at load 1.8.
WITH picked AS (
    SELECT id
    FROM hopper.jobs
    WHERE state = 'available'
      AND hashtextextended(queue, 0) = hashtextextended($1, 0)
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
WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
RETURNING j.id, j.attempt, j.queue, j.kind, j.args, j.priority, j.attempt - j.uncounted,
          j.max_attempts, j.timeout_ms, j.created_at, j.run_at,
          clock_timestamp(), statement_timestamp()
