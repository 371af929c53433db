-- Admin listing and search (job_list is a search without times): queue, state, kind,
-- group, meta, and a range of creation times (:created_after
-- inclusive, :created_before exclusive), newest first, keyset-paged by id (:before).
-- Walks the primary key backwards and filters: an admin query, not a hot one.
-- :meta: metadata containment (a flat JSON object, checked by hopper_core::meta): every
-- key of :meta is in the job's meta with the same type and value. No index; rows walked
-- by the primary key are filtered.
-- :listed: hopper_core::LISTED_VALUE_BYTES. An args or meta whose JSON text is longer is
-- left out (NULL) and its length given in the last two columns. The page is cut by the
-- inner LIMIT first, so only its rows are measured, and a left-out value is never read out.
SELECT id, queue, kind,
       CASE WHEN octet_length(args) <= :listed THEN args END,
       state, priority, run_at, attempt, uncounted, max_attempts, timeout_ms, node_id,
       lease_expires_at, created_at, attempted_at, finished_at, duration_ms, errors,
       group_key, unique_key,
       CASE WHEN octet_length(meta) <= :listed THEN meta END,
       CASE WHEN octet_length(args) > :listed THEN octet_length(args) END,
       CASE WHEN octet_length(meta) > :listed THEN octet_length(meta) END
FROM (SELECT id, queue, kind, args, state, priority, run_at, attempt, uncounted, max_attempts,
             timeout_ms, node_id, lease_expires_at, created_at, attempted_at, finished_at,
             duration_ms, errors, nullif(group_key, '') AS group_key, unique_key, meta
      FROM hopper_jobs
      WHERE (:queue IS NULL OR queue = :queue)
        AND (:state IS NULL OR state = :state)
        AND (:kind IS NULL OR kind = :kind)
        AND (:before IS NULL OR id < :before)
        AND (:created_after IS NULL OR created_at >= :created_after)
        AND (:created_before IS NULL OR created_at < :created_before)
        AND (:group IS NULL OR group_key = :group)
        AND (:meta IS NULL OR NOT EXISTS (
            SELECT 1
            FROM json_each(:meta) AS want
            WHERE NOT EXISTS (SELECT 1
                              FROM json_each(hopper_jobs.meta) AS have
                              WHERE have.key = want.key
                                AND have.type = want.type
                                AND have.atom IS want.atom)))
      ORDER BY id DESC
      LIMIT :limit)
ORDER BY id DESC
