-- The job holding a unique key: the unfinished one (hopper_jobs_unique_active_idx), else
-- the one of the given window (hopper_jobs_unique_window_idx; :window NULL: none).
SELECT id, state
FROM (
    SELECT id, state
    FROM hopper_jobs
    WHERE unique_key = :key
      AND state IN ('scheduled', 'available', 'running')
    UNION ALL
    SELECT id, state
    FROM hopper_jobs
    WHERE unique_key = :key
      AND unique_window = :window
)
LIMIT 1
