-- Claims up to :limit available jobs of :queue whose kind is in :kinds (a JSON array of
-- names), for :node; otherwise as job_claim.sql. For `hopper serve`, when every worker with
-- room in the queue declared the kinds it runs: jobs of other kinds stay where they are,
-- untouched, instead of being claimed and put back (which moved their run_at every time and
-- hid their age).
--
-- Index: hopper_jobs_claim_idx (queue, priority, run_at, id) WHERE state = 'available',
-- walked from its start in claim order; `kind` is not in it, so each entry's row is read
-- and entries of other kinds are stepped over: cheap while those are few, proportional to
-- their number otherwise (an index on kind would cost every insert and claim).
UPDATE hopper_jobs
SET state = 'running',
    attempt = attempt + 1,
    node_id = :node,
    attempted_at = :now,
    lease_expires_at = :now + min(timeout_ms * 1000, :lease_us)
WHERE id IN (
    SELECT id
    FROM hopper_jobs
    WHERE state = 'available'
      AND queue = :queue
      AND kind IN (SELECT value FROM json_each(:kinds))
    ORDER BY priority, run_at, id
    LIMIT :limit
)
RETURNING id, attempt, queue, kind, args, priority, attempt - uncounted, max_attempts,
          timeout_ms, created_at, run_at
