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
-- limit unless $9 is set. $13: only jobs of these kinds (NULL: every kind). The caller may have taken them from its settings cache and sent
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
-- Kinds ($13, hopper serve when every worker with room declared the kinds it runs): checked
-- on the heap row in step 2 (and for the stragglers), as in job_claim.sql; `kind` is in no
-- index, so a group's jobs of other kinds are stepped over, untouched, inside its range scan
-- (its k rows of the asked kinds, or its whole ready range when it has fewer). A group whose
-- ready jobs are all of other kinds gives nothing and is not picked; when no group gave
-- anything, the cursor returned is the last group served, so the next claim starts past
-- them and the groups beyond get their turn.
-- Rows locked in step 2 but not picked in step 3 (fewer than one per group) are unlocked
-- at the end of the transaction; a concurrent claimer may skip them meanwhile, nothing
-- else. Cost: one short index range scan per group served, as many as the plain claim's
-- one scan reads in all.
--
-- Figures: a grouped drain runs at about 0.8 of the plain one (scripts/bench_scheduling.sh);
-- every variant tried and its measurements are in docs/benchmarks.md ("Claim strategies
-- measured").
--
-- A count written by hand past what a lease can count stops nothing: the attempt is raised
-- at most to 2147483647 (`least`: `+ 1` past it would make the whole statement fail, and
-- with it every claim of the queue), and attempts used are returned as bigint (an
-- `uncounted` at either end of integer overflows a 32-bit difference); the caller fails
-- such a job as unreadable (scheduling.rs, `claimed_job`).
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
                  AND ($13::text[] IS NULL OR kind = ANY ($13::text[]))
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
      AND ($13::text[] IS NULL OR kind = ANY ($13::text[]))
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
    SET rate_tokens = $9::float8 - (SELECT count(*) FROM claimed),
        rate_refilled_at = $10::timestamptz
    WHERE name = $1
      AND $9::float8 IS NOT NULL
)
SELECT (SELECT sum(n) FROM busy)::bigint,
       -- The next cursor: the last group picked; when a claim of some kinds ($13) picked
       -- none, the last group it served, so that the next claim goes past them.
       coalesce((SELECT g FROM picked WHERE g IS NOT NULL ORDER BY rn DESC, turn DESC LIMIT 1),
                (SELECT g FROM turns WHERE $13::text[] IS NOT NULL ORDER BY turn DESC LIMIT 1)),
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
