-- Statement 1: marks a queue as grouped (once): from then on its claims rotate between
-- groups.
INSERT INTO hopper_queues (name, grouped, updated_at)
VALUES (:queue, 1, :now)
ON CONFLICT (name) DO UPDATE
SET grouped = 1,
    updated_at = excluded.updated_at;

-- Statement 2: the jobs already waiting without a group join the "no group" group '', so
-- the fair claim (which reads hopper_jobs_group_claim_idx) sees them.
UPDATE hopper_jobs
SET group_key = ''
WHERE queue = :queue
  AND group_key IS NULL
  AND state IN ('scheduled', 'available');
