-- Admin search: job_list's filters plus a range of creation times ($5 inclusive, $6
-- exclusive), newest first, keyset-paged by id ($4). Walks the primary key backwards and
-- filters; an admin query, not a hot one. $8 is the group; group_key '' (an ungrouped
-- job of a grouped queue) reads as no group.
-- $9: metadata containment (a flat object, checked by hopper_core::meta); no index on
-- meta, the rows walked by the primary key are filtered (docs/benchmarks.md says why).
SELECT id, queue, kind, args, state::text, priority, run_at, attempt, uncounted, max_attempts,
       timeout_ms, node_id, lease_expires_at, created_at, attempted_at, finished_at,
       duration_ms, errors, nullif(group_key, ''), unique_key, meta
FROM hopper.jobs
WHERE ($1::text IS NULL OR queue = $1)
  AND ($2::text IS NULL OR state = $2::text::hopper.job_state)
  AND ($3::text IS NULL OR kind = $3)
  AND ($4::uuid IS NULL OR id < $4)
  AND ($5::timestamptz IS NULL OR created_at >= $5)
  AND ($6::timestamptz IS NULL OR created_at < $6)
  AND ($8::text IS NULL OR group_key = $8)
  AND ($9::jsonb IS NULL OR meta @> $9)
ORDER BY id DESC
LIMIT $7
