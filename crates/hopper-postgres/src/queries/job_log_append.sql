-- LogStore::job_log_append: adds lines to attempts' logs, one entry per (job, attempt)
-- (the caller merges entries of the same attempt). $1 job ids, $2 attempts, $3 lines (a
-- JSON array each), $4 their JSON size, $5 lines the writer already dropped, $6 the bound
-- in bytes. Lines that would take an attempt's log past the bound are counted in
-- `dropped` instead of kept. Entries of jobs that no longer exist, or of attempts the job
-- has not had, are skipped: a job has at most one log per attempt it made.
--
-- Does not wait on a job row another transaction holds: one writer stores every remote
-- worker's lines (hopper serve), so a job held by an open transaction (being deleted,
-- selected FOR UPDATE) would stall everyone's logs. The jobs are locked first, FOR KEY
-- SHARE SKIP LOCKED (the lock the foreign key check of a new log row takes anyway; claims
-- and outcomes take FOR NO KEY UPDATE, which does not conflict with it), and the entries
-- of a held job are not stored. Returns the (job, attempt) of each entry stored; the
-- caller tells a held job from one that is gone. A log row locked by another transaction
-- (an operator's DELETE, UPDATE or SELECT FOR UPDATE on job_logs) is waited for: by a
-- runtime's store, whose entries are one attempt's, as long as it waits; by a shared
-- writer's (hopper serve's) at most 100 ms, the lock_timeout of its connection, past which
-- it stores with job_log_append_around_held.sql, which skips such rows too but costs more
-- to plan and run (logs.rs).
--
-- Index: jobs_pkey for the lock, one probe per entry; job_logs_pkey (job_id, attempt)
-- for the conflict.
WITH held_job AS MATERIALIZED (
    SELECT j.id, j.attempt
    FROM hopper.jobs AS j
    WHERE j.id = ANY ($1::uuid[])
    FOR KEY SHARE SKIP LOCKED
)
INSERT INTO hopper.job_logs AS l (job_id, attempt, lines, bytes, dropped)
SELECT i.job_id, i.attempt,
       CASE WHEN i.bytes <= $6 THEN i.lines ELSE '[]'::jsonb END,
       CASE WHEN i.bytes <= $6 THEN i.bytes ELSE 0 END,
       i.dropped + CASE WHEN i.bytes <= $6 THEN 0 ELSE jsonb_array_length(i.lines) END
FROM unnest($1::uuid[], $2::integer[], $3::jsonb[], $4::integer[], $5::bigint[])
     AS i(job_id, attempt, lines, bytes, dropped)
JOIN held_job AS h ON h.id = i.job_id AND i.attempt BETWEEN 1 AND h.attempt
ON CONFLICT (job_id, attempt) DO UPDATE
SET lines = CASE WHEN l.bytes + EXCLUDED.bytes <= $6 THEN l.lines || EXCLUDED.lines
                 ELSE l.lines END,
    dropped = l.dropped + EXCLUDED.dropped
              + CASE WHEN l.bytes + EXCLUDED.bytes <= $6 THEN 0
                     ELSE jsonb_array_length(EXCLUDED.lines) END,
    bytes = CASE WHEN l.bytes + EXCLUDED.bytes <= $6 THEN l.bytes + EXCLUDED.bytes
                 ELSE l.bytes END
RETURNING l.job_id, l.attempt
