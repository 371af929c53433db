-- Many jobs with groups or unique keys, in one statement (plain jobs go through binary
-- COPY, which cannot do ON CONFLICT). Returns the ids inserted; a job whose unique key is
-- taken (by an existing job or by an earlier one of this batch) is not.
-- $1 ids, $2 queues, $3 kinds, $4 args, $5 priorities, $6 run_ats (NULL: now),
-- $7 max_attempts, $8 timeouts (ms), $9 groups, $10 unique keys, $11 unique windows,
-- $12 now (NULL: the database's clock), $13 metas, $14 unique window ends.
WITH input AS (
    SELECT *
    FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::smallint[],
                $6::timestamptz[], $7::integer[], $8::integer[], $9::text[], $10::text[],
                $11::timestamptz[], $13::jsonb[], $14::timestamptz[])
         WITH ORDINALITY
         AS i(id, queue, kind, args, priority, run_at, max_attempts, timeout_ms, group_key,
              unique_key, unique_window, meta, unique_until, ord)
),
inserted AS (
    INSERT INTO hopper.jobs (id, queue, kind, args, state, priority, run_at, max_attempts,
                             timeout_ms, group_key, unique_key, unique_window, meta,
                             unique_until)
    SELECT i.id, i.queue, i.kind, i.args,
           CASE WHEN i.run_at > coalesce($12::timestamptz, now())
                THEN 'scheduled' ELSE 'available' END::hopper.job_state,
           i.priority, coalesce(i.run_at, $12::timestamptz, now()), i.max_attempts,
           i.timeout_ms,
           coalesce(i.group_key, (SELECT '' FROM hopper.queues q
                                   WHERE q.name = i.queue AND q.grouped)),
           i.unique_key, i.unique_window, i.meta, i.unique_until
    FROM input AS i
    ORDER BY i.ord
    ON CONFLICT DO NOTHING
    RETURNING id, state, queue
),
woken AS (
    SELECT pg_notify('hopper_wake', 'a:' || queue)
    FROM (SELECT DISTINCT queue FROM inserted WHERE state = 'available') AS q
)
SELECT id, (SELECT count(*) FROM woken) FROM inserted
