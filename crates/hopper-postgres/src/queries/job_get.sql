-- One job by id. group_key '' (an ungrouped job of a grouped queue) reads as no group.
SELECT id, queue, kind, args, state::text, priority, run_at, attempt, uncounted, max_attempts,
       timeout_ms, node_id, lease_expires_at, created_at, attempted_at, finished_at,
       duration_ms, errors, nullif(group_key, ''), unique_key, meta
FROM hopper.jobs
WHERE id = $1
