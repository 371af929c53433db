-- Admin listing and search (job_list is a search without times): queue, state, kind,
-- group, meta, and a range of creation times ($5 inclusive, $6
-- exclusive), newest first, keyset-paged by id ($4). Walks the primary key backwards and
-- filters; an admin query, not a hot one. $8 is the group; group_key '' (an ungrouped
-- job of a grouped queue) reads as no group.
-- $9: metadata containment (a flat object, checked by hopper_core::meta); no index on
-- meta, the rows walked by the primary key are filtered (docs/benchmarks.md says why).
-- $10: hopper_core::LISTED_VALUE_BYTES. args and meta are read as JSON text, once: an
-- args or meta whose text is longer is left out (NULL) and its length given in the last two
-- columns. The page is cut by the inner LIMIT first, so only its rows are turned into text,
-- and a left-out value never leaves the server. OFFSET 0 keeps the texts a subquery: pulled
-- up, each use would convert the value again (100 jobs of 1 MiB: 2.6 s, not 0.64 s).
SELECT page.id, page.queue, page.kind,
       CASE WHEN octet_length(json.args) <= $10::int8 THEN json.args END,
       page.state, page.priority, page.run_at, page.attempt, page.uncounted,
       page.max_attempts, page.timeout_ms, page.node_id, page.lease_expires_at,
       page.created_at, page.attempted_at, page.finished_at, page.duration_ms,
       page.errors, page.group_key, page.unique_key,
       CASE WHEN octet_length(json.meta) <= $10::int8 THEN json.meta END,
       CASE WHEN octet_length(json.args) > $10::int8 THEN octet_length(json.args)::int8 END,
       CASE WHEN octet_length(json.meta) > $10::int8 THEN octet_length(json.meta)::int8 END
FROM (SELECT id, queue, kind, args, state::text AS state, priority, run_at, attempt,
             uncounted, max_attempts, timeout_ms, node_id, lease_expires_at, created_at,
             attempted_at, finished_at, duration_ms, errors,
             nullif(group_key, '') AS group_key, unique_key, meta
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
      LIMIT $7) AS page
CROSS JOIN LATERAL (SELECT page.args::text AS args, page.meta::text AS meta OFFSET 0) AS json
ORDER BY page.id DESC
