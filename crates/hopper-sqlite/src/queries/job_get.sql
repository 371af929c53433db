-- One job, whole: its args and meta are never left out (the last two columns are
-- job_search.sql's sizes of left-out values). Index: the primary key.
SELECT id, queue, kind, args, state, priority, run_at, attempt, uncounted, max_attempts,
       timeout_ms, node_id, lease_expires_at, created_at, attempted_at, finished_at,
       duration_ms, errors, nullif(group_key, ''), unique_key, meta, NULL, NULL
FROM hopper_jobs
WHERE id = :id
