-- Claims from a queue whose jobs carry groups: groups take turns (round-robin), priority
-- is strict and FIFO holds within a group. Runs alone for a queue without limits, or as
-- the second statement after queue_lock.sql for a limited one (then $7-$10 are set).
-- $1 queue, $2 node, $3 most jobs, $4 lease ms, $5 now, $6 the groups to serve, in turn
-- order (the process's cached ring rotated to start after its cursor, see
-- src/settings/ring.rs), $7 max_running_per_group, $8 max_running, $9 tokens left after
-- refill (NULL: no rate limit), $10 refill instant, $11 the ungrouped stragglers the
-- ring's last load saw at the head of the queue (ids; usually none), $12 true for a limited
-- queue: then nothing is claimed unless the queue's settings row (held by this
-- transaction, see queue_lock.sql) is not paused and has the limits $7 and $8 and no rate
-- limit unless $9 is set. The caller may have taken them from its settings cache and sent
-- this statement before the lock was granted (one round trip); when the row says
-- otherwise, it tries again with the row's values.
--
-- Why this shape (the plain claim's ORDER BY priority, run_at LIMIT n would hand a group
-- with 10,000 old jobs every slot until its backlog is gone):
--
-- 1. turns: the groups come from the caller, not from the index. Each process keeps the
--    list of groups with ready jobs (queue_groups_ready.sql, a loose index scan) and
--    reloads it every 100 ms, pipelined with a claim, at once when it has none, and when
--    a claim from it came back empty (so a new group is served within 100 ms while others
--    keep the workers busy, and at once when they do not). Only the first $3 groups are
--    served (plus those at their per-group limit, which get nothing).
-- 2. candidates: per group, a LATERAL top-k in claim order over jobs_group_claim_idx
--    (queue, group_key, priority, run_at, id) WHERE available AND group_key IS NOT NULL:
--    an index range scan of that group's first entries, k = ceil($3 / groups with room),
--    capped by the group's room under its limit, locked FOR UPDATE SKIP LOCKED, so
--    concurrent claimers skip each other's rows inside each group as the plain claim does.
-- 3. picked: the first job of every group in turn order, then the second of every group,
--    and so on, up to the allowance: round-robin across groups. The last group picked
--    comes back as the next cursor, so the groups that got one job more this time come
--    last next time.
-- 4. claimed: the picked rows are found by `id = ANY (ARRAY(…))`, a primary-key probe per
--    row whatever the estimates (as a join, the generic plan hashed a sequential scan).
-- Rows locked in step 2 but not picked in step 3 (fewer than one per group) are unlocked
-- at the end of the transaction; a concurrent claimer may skip them meanwhile, nothing
-- else. Cost: one short index range scan per group served, as many as the plain claim's
-- one scan reads in all.
--
-- Measured with scripts/bench_scheduling.sh (W3 drain, 20,000 no-op jobs over 16 groups,
-- concurrency 50, ratio to the plain queue in the same round; docs/benchmarks.md has the
-- tables; this shared 2-core machine moves single rounds by up to 2x):
--   - planned per execution: 3-6 ms of planning per claim for ~1 ms of work -> generic
--     plan (GENERIC_PLAN_ON and LIMITED_CLAIM in scheduling.rs);
--   - picked ids joined to the table: the generic plan hashed a sequential scan (14 ms
--     per claim) -> `id = ANY (ARRAY(...))` (0.9 ms);
--   - the ring walked inside every claim (a recursive loose index scan: 2 probes per
--     group, each stepping over the dead entries at a group's head, plus 32 heap fetches
--     looking for stragglers): 0.22-0.51 of plain;
--   - the ring cached per process, groups passed as an array, one LATERAL range scan per
--     group (this file): 0.83-0.89 of plain summed over 5-6 rounds (medians 0.75-0.80;
--     with a limit as well 0.70-0.83). At the statement level (pgbench, claims of 100 from
--     20,000 jobs) it now costs what the plain claim costs; the commit dominates both.
--   - with the runtime's four claims in flight (6c82ef1), the rows a claim locks but does
--     not pick (up to one per group) are skipped by its siblings, which then come back
--     short near the end of a drain, and the runtime stops claiming until its poll
--     interval (1 s): traced, 0.83 s of claims, then nothing until the last 5 jobs at
--     1.84 s. Ratios then 0.42 / 0.39 / 0.87 / 0.45 (2026-11-24, load 2-4). Now the
--     statement returns how many rows it locked without picking them (third column) and
--     such a claim wakes the process's claimers after its commit (fair.rs): 0.79 / 0.74
--     (load 7-8), and over 8 rounds at 32a3efa (docs/benchmarks.md) median 0.72, sum of
--     jobs/s 0.67 of plain, rounds 0.47-1.00. What is left was not measured apart; candidates:
--     the claims in flight reading the same group heads (4 claims x 16 groups, each
--     stepping over its siblings' rows) and the transaction around the statement.
--   - the end-of-drain stall remained in about half the runs (the slow mode of the bimodal
--     rounds, ~9,000 against ~16,000 jobs/s): traced by attempted_at, the last 1-11 jobs
--     were claimed 1.0 s after the others. The groups run dry unevenly, so a claim whose
--     other groups were empty came back short though one group still had jobs, and the
--     runtime took that for a drained queue (its poll interval). Now the statement returns
--     the groups that gave their whole share (fourth column) and a short claim asks them
--     for the rest (claim_fair in fair.rs): no stall in 8 traced runs; over 8 rounds
--     (2026-11-24 09:01, load 4.5) 0.77 / 0.77 / 0.70 / 0.77 / 0.75 / 0.74 / 0.71 / 0.81
--     (median 0.76) against 0.28-0.71 (median 0.47, half the rounds stalled) in the 8
--     rounds just before (not alternated; alternated later, the tree before this and the
--     next change against both: 0.34 / 0.76, docs/benchmarks.md).
--   - LOST: exact per-group shares ($3 split evenly over the groups with room, the first
--     ones in turn order one more: no row locked without a turn, no wake-ups), 4 x 2
--     rounds alternated with the ceil shares above (2026-11-24 09:17, load 3.5-4):
--     grouped 0.69 / 0.37 / 0.70 / 0.34 / 0.74 / 0.69 / 0.83 / 0.40 against 0.84 / 0.73 /
--     0.74 / 0.81 / 0.75 / 0.63 / 0.70 / 0.75; the three low rounds look like the idle
--     poll interval again (a short claim: with exact shares, any group with fewer jobs
--     than its share cuts the claim, where the ceil shares' spare rows filled in), not
--     traced further; the others no better.
--   - the claim of a queue without limits as a statement of its own (SET plan_cache_mode,
--     the claim, RESET: its locks end with it) instead of in a transaction block (BEGIN;
--     SET LOCAL, the claim, COMMIT: locks held until the client's COMMIT arrives; wait
--     events sampled in a drain showed the claim's backend in ClientRead for ~1/4 of its
--     samples), 7 x 2 rounds alternated (2026-11-24 09:22, load 4-4.5): 0.81 / 0.89 / 0.72
--     / 0.64 / 0.62 / 0.77 / 1.18 / 1.12 / 1.09 / 0.85 / 0.78 / 0.85 / 0.64 / 0.86 (median
--     0.83, sum of jobs/s 0.83) against 0.71 / 0.58 / 0.77 / 0.69 / 0.71 / 0.74 / 0.69 /
--     0.86 / 0.70 / 0.66 / 1.08 / 0.74 / 0.65 / 0.66 (median 0.71, sum 0.72).
--   - not tried: giving the claims in flight of a process disjoint groups.
WITH busy AS (
    -- Running jobs per group, counted only when a limit needs them (a one-time filter:
    -- the statement without limits never reads them). jobs_running_idx holds only
    -- running jobs, so this costs the number of running jobs.
    SELECT group_key AS g, count(*) AS n
    FROM hopper.jobs
    WHERE state = 'running'
      AND queue = $1
      AND ($7::integer IS NOT NULL OR $8::integer IS NOT NULL)
    GROUP BY group_key
),
settled AS (
    SELECT NOT $12::boolean OR EXISTS (
        SELECT 1
        FROM hopper.queues
        WHERE name = $1
          AND NOT paused
          AND max_running IS NOT DISTINCT FROM $8::integer
          AND max_running_per_group IS NOT DISTINCT FROM $7::integer
          AND (rate_limit IS NULL OR $9::float8 IS NOT NULL)) AS ok
),
allowance AS (
    SELECT CASE WHEN (SELECT ok FROM settled) THEN 1 ELSE 0 END
           * greatest(0, least($3::bigint,
                             coalesce($8::integer - (SELECT sum(n) FROM busy)::integer,
                                      $8::integer, $3::bigint))) AS n
),
turns AS (
    SELECT r.g, r.turn,
           greatest(0, coalesce($7::integer - b.n::integer, $7::integer, $3::bigint)) AS room
    FROM unnest($6::text[]) WITH ORDINALITY AS r(g, turn)
    LEFT JOIN busy AS b ON b.g = r.g
    WHERE r.turn <= $3 + (SELECT count(*) FROM busy WHERE busy.n >= $7::integer)
),
share AS (
    SELECT ceil($3::float8 / greatest(1, count(*)))::bigint AS k
    FROM turns
    WHERE room > 0
),
candidates AS (
    SELECT c.id, t.turn, t.g, c.rn, t.room
    FROM turns AS t,
         LATERAL (
            SELECT j.id, row_number() OVER () AS rn
            FROM (
                SELECT id
                FROM hopper.jobs
                WHERE state = 'available'
                  AND queue = $1
                  AND group_key = t.g
                ORDER BY priority, run_at, id
                LIMIT least(t.room, (SELECT k FROM share))
                FOR UPDATE SKIP LOCKED
            ) AS j
         ) AS c
),
-- Stragglers (jobs without a group in this grouped queue, see queue_groups_ready.sql) get
-- the first turn. Those already claimed elsewhere are no longer available.
stray AS (
    SELECT id
    FROM hopper.jobs
    WHERE id = ANY ($11::uuid[])
      AND state = 'available'
      AND queue = $1
    FOR UPDATE SKIP LOCKED
),
stragglers AS (
    SELECT id, 0::bigint AS turn, NULL::text AS g, row_number() OVER () AS rn
    FROM stray
),
picked AS (
    SELECT id, turn, g, rn
    FROM (SELECT id, turn, g, rn FROM candidates
          UNION ALL
          SELECT id, turn, g, rn FROM stragglers) AS c
    ORDER BY rn, turn
    LIMIT (SELECT n FROM allowance)
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
    SET rate_tokens = $9::float8 - (SELECT count(*) FROM claimed),
        rate_refilled_at = $10::timestamptz
    WHERE name = $1
      AND $9::float8 IS NOT NULL
)
SELECT (SELECT sum(n) FROM busy)::bigint,
       (SELECT g FROM picked WHERE g IS NOT NULL ORDER BY rn DESC, turn DESC LIMIT 1),
       (SELECT count(*) FROM candidates) - (SELECT count(*) FROM picked WHERE g IS NOT NULL),
       -- The groups that gave their whole share and have room for more (in turn order):
       -- they may have more ready jobs. A claim that came back short asks them again.
       ARRAY(SELECT g
             FROM candidates
             GROUP BY g, room
             HAVING count(*) = (SELECT k FROM share)
                AND room > (SELECT k FROM share)
             ORDER BY min(turn)),
       c.*
FROM (VALUES (1)) AS one
LEFT JOIN claimed AS c ON true
