-- The job holding a unique key: the unfinished one (jobs_unique_active_idx), else the one
-- of the given window (jobs_unique_window_idx). $1 key, $2 window start (NULL: none).
(SELECT id, state::text
 FROM hopper.jobs
 WHERE unique_key = $1
   AND state IN ('scheduled', 'available', 'running'))
UNION ALL
(SELECT id, state::text
 FROM hopper.jobs
 WHERE unique_key = $1
   AND unique_window = $2::timestamptz)
LIMIT 1
