-- The fair claim's ring (src/settings/ring.rs): the groups of queue $1 that have ready
-- jobs, in key order starting after $2 (the process's rotation cursor; NULL: from the
-- first) and wrapping around, at most $3 of them; and the ungrouped stragglers among the
-- first 32 ready jobs of the queue (see $11 of job_claim_fair.sql).
-- Run when a process's ring is older than ring::MAX_AGE (pipelined with a claim, so no
-- extra round trip), when it has none, and when a claim from it came back empty.
--
-- A loose index scan over jobs_group_claim_idx (queue, group_key, priority, run_at, id)
-- WHERE available AND group_key IS NOT NULL: each step is one index probe "first
-- group_key > the previous one", so listing n groups costs n probes however many jobs each
-- group has. (OFFSET 0 keeps each step's subquery from being pulled up and evaluated
-- twice.) It runs a few times a second per process, not inside every fair claim, where it
-- would cost 2 probes per group per claim.
WITH RECURSIVE ring(g, n, first) AS (
    SELECT s.g, 1, s.g
    FROM (SELECT coalesce(
            (SELECT group_key FROM hopper.jobs
              WHERE state = 'available' AND queue = $1 AND group_key IS NOT NULL
                AND group_key > coalesce($2::text, '')
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
    WHERE r.n < $3::integer
      AND nx.g <> r.first
)
-- Stragglers: jobs without a group in this grouped queue (inserted by a process whose
-- settings cache did not know yet that the queue had become grouped). They are not in
-- jobs_group_claim_idx; the ones among the first 32 entries of jobs_claim_idx are handed to
-- the claims, so they run when they reach the head of the queue instead of never. Reading
-- the group of those 32 jobs costs 32 heap fetches, which is why the claims do not.
-- The queue's hash is what reaches the index (migration 0005): without it, this read the
-- whole table and sorted it for its first 32 (8.8 ms on 20,000 jobs against 0.1 ms, at
-- every reload of every process's ring; crates/hopper/tests/integration/postgres_plans.rs).
SELECT ARRAY(SELECT g FROM ring ORDER BY n),
       ARRAY(SELECT head.id
             FROM (SELECT id, group_key
                   FROM hopper.jobs
                   WHERE state = 'available'
                     AND hashtextextended(queue, 0) = hashtextextended($1, 0)
                     AND queue = $1
                   ORDER BY priority, run_at, id
                   LIMIT 32) AS head
             WHERE head.group_key IS NULL)
