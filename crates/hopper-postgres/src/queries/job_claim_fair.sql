-- Claims from a queue whose jobs carry groups: groups take turns (round-robin), priority
-- is strict and FIFO holds within a group. Runs alone for a queue without limits, or as
-- the second statement after queue_lock.sql for a limited one (then $7-$10 are set).
-- $1 queue, $2 node, $3 most jobs, $4 lease ms, $5 now, $6 the group served last by this
-- node (the rotation's cursor; NULL: start), $7 max_running_per_group, $8 max_running,
-- $9 tokens left after refill (NULL: no rate limit), $10 refill instant.
--
-- Why this shape (the plain claim's ORDER BY priority, run_at LIMIT n would hand a group
-- with 10,000 old jobs every slot until its backlog is gone):
--
-- 1. ring: a loose index scan over jobs_group_claim_idx (queue, group_key, priority,
--    run_at, id) WHERE available AND group_key IS NOT NULL. Each step is one index probe
--    "first group_key > the previous one", so finding the next n groups costs n probes
--    however many jobs each group has: no scan of the backlog, no DISTINCT over it. It
--    starts after the cursor and wraps around to the first group, and stops after $3
--    groups (no claim needs more) or when it is back where it started. (OFFSET 0 keeps
--    each step's subquery from being pulled up, which evaluated its probes two or three
--    times: once for the filter, once for the output.)
-- 2. candidates: per group, a LATERAL top-k in claim order over the same index (an index
--    range scan of that group's first entries), k = ceil($3 / groups), locked with
--    FOR UPDATE SKIP LOCKED, so concurrent claimers skip each other's rows inside each
--    group exactly as the plain claim does. Groups at their per-group limit get none.
-- 3. picked: the first job of every group in ring order, then the second of every group,
--    and so on, up to the allowance: round-robin across groups.
-- 4. claimed: the picked rows are found by `id = ANY (ARRAY(…))`, a primary-key probe per
--    row whatever the estimates (as a join, the generic plan hashed a sequential scan).
--    Each row's group comes back; the caller moves its cursor to the group furthest along
--    the ring.
-- Rows locked in step 2 but not picked in step 3 (at most one per group) are unlocked at
-- the end of the transaction; a concurrent claimer may skip them meanwhile, nothing else.
-- Cost: about 2 × groups visited index probes, independent of the backlog.
WITH RECURSIVE ring(g, n, first) AS (
    SELECT s.g, 1, s.g
    FROM (SELECT coalesce(
            (SELECT group_key FROM hopper.jobs
              WHERE state = 'available' AND queue = $1 AND group_key IS NOT NULL
                AND group_key > coalesce($6::text, '')
              ORDER BY group_key LIMIT 1),
            (SELECT group_key FROM hopper.jobs
              WHERE state = 'available' AND queue = $1 AND group_key IS NOT NULL
              ORDER BY group_key LIMIT 1)) AS g
          OFFSET 0) AS s
    WHERE s.g IS NOT NULL
  UNION ALL
    SELECT nx.g, r.n + 1, r.first
    FROM ring AS r,
         LATERAL (SELECT coalesce(
            (SELECT group_key FROM hopper.jobs
              WHERE state = 'available' AND queue = $1 AND group_key IS NOT NULL
                AND group_key > r.g
              ORDER BY group_key LIMIT 1),
            (SELECT group_key FROM hopper.jobs
              WHERE state = 'available' AND queue = $1 AND group_key IS NOT NULL
              ORDER BY group_key LIMIT 1)) AS g
          OFFSET 0) AS nx
    WHERE r.n < $3 + (SELECT count(*) FROM busy WHERE busy.n >= $7::integer)
      AND nx.g <> r.first
),
-- Running jobs per group and in all, counted only when a limit needs them (one-time
-- filters: the statement without limits never reads them). jobs_running_idx holds only
-- running jobs, so this costs the number of running jobs.
busy AS (
    SELECT group_key AS g, count(*) AS n
    FROM hopper.jobs
    WHERE state = 'running'
      AND queue = $1
      AND ($7::integer IS NOT NULL OR $8::integer IS NOT NULL)
    GROUP BY group_key
),
allowance AS (
    SELECT greatest(0, least($3, coalesce($8::integer - (SELECT sum(n) FROM busy)::integer,
                                          $8::integer, $3))) AS n
),
turns AS (
    SELECT ring.g, ring.n AS turn,
           coalesce($7::integer - b.n::integer, $7::integer, $3) AS room
    FROM ring
    LEFT JOIN busy AS b ON b.g = ring.g
),
candidates AS (
    SELECT c.id, t.turn, t.g, c.rn
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
                LIMIT (SELECT ceil($3::float8 / greatest(1, count(*)))::bigint
                       FROM turns WHERE turns.room > 0)
                FOR UPDATE SKIP LOCKED
            ) AS j
         ) AS c
    WHERE c.rn <= t.room
),
-- Stragglers: jobs without a group in this grouped queue (inserted by a process whose
-- settings cache did not know yet that the queue had become grouped). They are not in
-- jobs_group_claim_idx; the ones among the first 32 entries of jobs_claim_idx get the first
-- turn, so they run when they reach the head of the queue instead of never.
stray AS (
    SELECT j.id
    FROM hopper.jobs AS j
    WHERE j.id IN (
        SELECT h.id
        FROM (SELECT id, group_key
              FROM hopper.jobs
              WHERE state = 'available'
                AND queue = $1
              ORDER BY priority, run_at, id
              LIMIT 32) AS h
        WHERE h.group_key IS NULL)
      AND j.state = 'available'
    FOR UPDATE SKIP LOCKED
),
stragglers AS (
    SELECT id, 0::bigint AS turn, NULL::text AS g, row_number() OVER () AS rn
    FROM stray
),
picked AS (
    SELECT id, turn, g
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
    RETURNING NULL::bigint, j.group_key,
              j.id, j.attempt, j.queue, j.kind, j.args, j.priority, j.attempt - j.uncounted,
              j.max_attempts, j.timeout_ms, j.created_at, j.run_at
),
bucket AS (
    UPDATE hopper.queues
    SET rate_tokens = $9::float8 - (SELECT count(*) FROM claimed),
        rate_refilled_at = $10::timestamptz
    WHERE name = $1
      AND $9::float8 IS NOT NULL
)
SELECT (SELECT sum(n) FROM busy)::bigint, c.*
FROM (VALUES (1)) AS one
LEFT JOIN claimed AS c ON true
