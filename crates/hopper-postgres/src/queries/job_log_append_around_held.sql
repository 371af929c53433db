-- LogStore::job_log_append once job_log_append.sql gave up waiting for a row lock (past
-- the caller's bound): the same entries and parameters, stored the same way, but waiting on
-- no row another transaction holds. The jobs are locked first, FOR KEY SHARE SKIP LOCKED,
-- as job_log_append.sql does; then the log rows that exist already, FOR NO KEY UPDATE
-- SKIP LOCKED (the lock the update below takes anyway). An entry whose log row exists but
-- is held (an operator's DELETE, UPDATE or SELECT FOR UPDATE on job_logs) is not stored,
-- since its insert would wait to learn whether the row stays. Returns the (job, attempt)
-- of each entry stored; the caller tells a held one from one that is gone.
--
-- Sent as text, planned at each run: its `logged` lookup is a join whose best plan
-- depends on the size of job_logs, which a plan cached while the table was small would
-- keep scanning whole. Index: jobs_pkey for the job lock, one probe per entry;
-- job_logs_pkey (job_id, attempt) for the log rows that exist (one probe per entry), for
-- their lock (one per row found) and for the conflict of the insert.
WITH held_job AS MATERIALIZED (
    SELECT j.id, j.attempt
    FROM hopper.jobs AS j
    WHERE j.id = ANY ($1::uuid[])
    FOR KEY SHARE SKIP LOCKED
),
logged AS MATERIALIZED (
    SELECT l.job_id, l.attempt
    FROM hopper.job_logs AS l
    WHERE (l.job_id, l.attempt) IN (SELECT * FROM unnest($1::uuid[], $2::integer[]))
),
free_log AS MATERIALIZED (
    SELECT l.job_id, l.attempt
    FROM hopper.job_logs AS l
    WHERE (l.job_id, l.attempt) IN (SELECT * FROM logged)
    FOR NO KEY UPDATE SKIP LOCKED
)
INSERT INTO hopper.job_logs AS l (job_id, attempt, lines, bytes, dropped)
SELECT i.job_id, i.attempt,
       CASE WHEN i.bytes <= $6 THEN i.lines ELSE '[]'::jsonb END,
       CASE WHEN i.bytes <= $6 THEN i.bytes ELSE 0 END,
       i.dropped + CASE WHEN i.bytes <= $6 THEN 0 ELSE jsonb_array_length(i.lines) END
FROM unnest($1::uuid[], $2::integer[], $3::jsonb[], $4::integer[], $5::bigint[])
     AS i(job_id, attempt, lines, bytes, dropped)
JOIN held_job AS h ON h.id = i.job_id AND i.attempt BETWEEN 1 AND h.attempt
WHERE (i.job_id, i.attempt) NOT IN (SELECT * FROM logged EXCEPT SELECT * FROM free_log)
ON CONFLICT (job_id, attempt) DO UPDATE
SET lines = CASE WHEN l.bytes + EXCLUDED.bytes <= $6 THEN l.lines || EXCLUDED.lines
                 ELSE l.lines END,
    dropped = l.dropped + EXCLUDED.dropped
              + CASE WHEN l.bytes + EXCLUDED.bytes <= $6 THEN 0
                     ELSE jsonb_array_length(EXCLUDED.lines) END,
    bytes = CASE WHEN l.bytes + EXCLUDED.bytes <= $6 THEN l.bytes + EXCLUDED.bytes
                 ELSE l.bytes END
RETURNING l.job_id, l.attempt
