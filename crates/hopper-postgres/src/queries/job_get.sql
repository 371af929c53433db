-- One job by id, whole: its args and meta are never left out (the last two columns are
-- job_search.sql's sizes of left-out values), read as JSON text as the listings read them.
-- group_key '' (an ungrouped job of a grouped queue) reads as no group.
SELECT id, queue, kind, args::text, state::text, priority, run_at, attempt, uncounted,
       max_attempts, timeout_ms, node_id, lease_expires_at, created_at, attempted_at,
       finished_at, duration_ms, errors, nullif(group_key, ''), unique_key, meta::text,
       NULL::int8, NULL::int8
FROM hopper.jobs
WHERE id = $1
