-- Statement 1: marks a queue as grouped (once): from then on its claims rotate between
-- groups.
INSERT INTO hopper_queues (name, grouped, updated_at)
VALUES (:queue, 1, :now)
ON CONFLICT (name) DO UPDATE
SET grouped = 1,
    updated_at = excluded.updated_at;

-- Statement 2: the queue's jobs without a group join the "no group" group '', so the fair
-- claim (which reads hopper_jobs_group_claim_idx) sees them: every state, not only the
-- waiting ones, because a running, failed or cancelled job can become available again
-- (retry, rescue, manual retry) and must not come back invisible to the fair claim. A
-- one-time scan of the table, when the queue gets its first grouped job.
UPDATE hopper_jobs
SET group_key = ''
WHERE queue = :queue
  AND group_key IS NULL;
