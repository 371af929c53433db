-- What keeps a job from being inserted: the job holding its unique key, the unfinished one
-- (jobs_unique_active_idx), else the one of the given window (jobs_unique_window_idx);
-- else the job of its id (jobs_pkey), whose id is taken: holds_key false.
-- $1 key, $2 window start (NULL: none), $3 the job's id.
(SELECT id, state::text, true AS holds_key
 FROM hopper.jobs
 WHERE unique_key = $1
   AND state IN ('scheduled', 'available', 'running'))
UNION ALL
(SELECT id, state::text, true
 FROM hopper.jobs
 WHERE unique_key = $1
   AND unique_window = $2::timestamptz)
UNION ALL
(SELECT id, state::text, false
 FROM hopper.jobs
 WHERE id = $3)
LIMIT 1
