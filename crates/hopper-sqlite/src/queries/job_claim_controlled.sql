-- The claim of a queue with settings (paused, grouped or limited), in steps the backend
-- runs inside one `BEGIN IMMEDIATE` transaction (so no other claimer, in this process or
-- another, can interleave), after reading the queue's row (queue_list.sql):
-- PostgreSQL needs one careful statement with row locks and SKIP LOCKED
-- (job_claim_fair.sql, job_claim_limited.sql); under SQLite's single writer the same
-- decisions are plain reads followed by writes.

-- Statement 1: jobs of the queue running now, by group (for max_running and
-- max_running_per_group). Index: hopper_jobs_running_idx holds only running jobs.
SELECT coalesce(group_key, ''), count(*)
FROM hopper_jobs
WHERE state = 'running'
  AND queue = :queue
GROUP BY 1;

-- Statement 2: the next group after :after with ready jobs: one probe of
-- hopper_jobs_group_claim_idx (a loose index scan, a step at a time, whatever the backlog).
SELECT group_key
FROM hopper_jobs
WHERE state = 'available'
  AND queue = :queue
  AND group_key IS NOT NULL
  AND group_key > :after
ORDER BY group_key
LIMIT 1;

-- Statement 3: the first group with ready jobs (the ring wraps around to it).
SELECT group_key
FROM hopper_jobs
WHERE state = 'available'
  AND queue = :queue
  AND group_key IS NOT NULL
ORDER BY group_key
LIMIT 1;

-- Statement 4: one group's first ready jobs, in claim order (same index); only of :kinds
-- (a JSON array) unless it is NULL, as job_claim.sql.
SELECT id
FROM hopper_jobs
WHERE state = 'available'
  AND queue = :queue
  AND group_key = :group_key
  AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
ORDER BY priority, run_at, id
LIMIT :limit;

-- Statement 5: a queue's first ready jobs, in claim order (hopper_jobs_claim_idx); only of
-- :kinds unless it is NULL.
SELECT id
FROM hopper_jobs
WHERE state = 'available'
  AND queue = :queue
  AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
ORDER BY priority, run_at, id
LIMIT :limit;

-- Statement 6: claims one picked job, as job_claim.sql does (the attempt raised from at
-- most 2147483647, as there).
UPDATE hopper_jobs
SET state = 'running',
    attempt = min(attempt, 2147483647) + 1,
    node_id = :node,
    attempted_at = :now,
    lease_expires_at = :now + min(timeout_ms * 1000, :lease_us)
WHERE id = :id
  AND state = 'available'
RETURNING id, attempt, queue, kind, args, priority, attempt - uncounted, max_attempts,
          timeout_ms, created_at, run_at, meta;

-- Statement 7: what is left in the rate bucket after this claim.
UPDATE hopper_queues
SET rate_tokens = :tokens,
    rate_refilled_at = :now
WHERE name = :queue;
