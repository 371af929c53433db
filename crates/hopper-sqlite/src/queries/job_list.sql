-- Admin listing, newest first, keyset-paged by id (:before). Filters are optional (NULL).
-- Walks the primary key backwards from :before and stops at :limit matches: an admin
-- query, not a hot one.
SELECT id, queue, kind, args, state, priority, run_at, attempt, uncounted, max_attempts,
       timeout_ms, node_id, lease_expires_at, created_at, attempted_at, finished_at,
       duration_ms, errors, nullif(group_key, ''), unique_key, meta
FROM hopper_jobs
WHERE (:queue IS NULL OR queue = :queue)
  AND (:state IS NULL OR state = :state)
  AND (:kind IS NULL OR kind = :kind)
  AND (:before IS NULL OR id < :before)
  AND (:group IS NULL OR group_key = :group)
ORDER BY id DESC
LIMIT :limit
