-- Statement 1: makes due scheduled jobs available, 1,000 at a time (the caller repeats,
-- one transaction per batch, while batches are full), returning their queues to wake.
-- Index: hopper_jobs_scheduled_idx (run_at) WHERE state = 'scheduled'.
UPDATE hopper_jobs
SET state = 'available'
WHERE id IN (
    SELECT id
    FROM hopper_jobs
    WHERE state = 'scheduled'
      AND run_at <= :now
    ORDER BY run_at
    LIMIT 1000
)
RETURNING queue;

-- Statement 2: when the next scheduled job is due. Same index, first entry after :now.
SELECT min(run_at)
FROM hopper_jobs
WHERE state = 'scheduled'
  AND run_at > :now;
