-- LogStore::job_log_append: adds lines to attempts' logs, one entry per (job, attempt)
-- (the caller merges entries of the same attempt). $1 job ids, $2 attempts, $3 lines (a
-- JSON array each), $4 their JSON size, $5 lines the writer already dropped, $6 the bound
-- in bytes. Lines that would take an attempt's log past the bound are counted in
-- `dropped` instead of kept. Entries of jobs that no longer exist, or of attempts the job
-- has not had, are skipped: a job has at most one log per attempt it made.
--
-- Never waits on another transaction's row lock: one writer stores every remote worker's
-- lines (hopper serve), so a row held by an open transaction (a job being deleted or
-- selected FOR UPDATE, a log row locked or being pruned) would stall everyone's logs. The
-- rows an entry needs are locked first with SKIP LOCKED: its job's FOR KEY SHARE (what
-- the foreign key check of a new log row takes; claims and outcomes take FOR NO KEY
-- UPDATE, which does not conflict) and its log row, if it has one, FOR UPDATE (what the
-- upsert takes). An entry whose job or log row is held elsewhere is not stored and is
-- returned: the caller answers it as busy, and it is sent again. Only a log row inserted
-- by a transaction still open (no writer of hopper's does that for an attempt another
-- writes) would still be waited for.
--
-- Index: the primary keys, jobs_pkey for the jobs and job_logs_pkey (job_id, attempt) for
-- the logs and the conflict; one probe per entry each.
WITH entry AS (
    SELECT *
    FROM unnest($1::uuid[], $2::integer[], $3::jsonb[], $4::integer[], $5::bigint[])
         AS i(job_id, attempt, lines, bytes, dropped)
),
held_job AS (
    SELECT j.id, j.attempt
    FROM hopper.jobs AS j
    WHERE j.id = ANY ($1::uuid[])
    FOR KEY SHARE SKIP LOCKED
),
held_log AS (
    SELECT l.job_id, l.attempt
    FROM hopper.job_logs AS l
    WHERE (l.job_id, l.attempt) IN (SELECT e.job_id, e.attempt FROM entry AS e)
    FOR UPDATE SKIP LOCKED
),
ready AS (
    SELECT e.*
    FROM entry AS e
    JOIN held_job AS h ON h.id = e.job_id AND e.attempt BETWEEN 1 AND h.attempt
    WHERE EXISTS (SELECT 1 FROM held_log AS g
                  WHERE g.job_id = e.job_id AND g.attempt = e.attempt)
       OR NOT EXISTS (SELECT 1 FROM hopper.job_logs AS l
                      WHERE l.job_id = e.job_id AND l.attempt = e.attempt)
),
stored AS (
    INSERT INTO hopper.job_logs AS l (job_id, attempt, lines, bytes, dropped)
    SELECT r.job_id, r.attempt,
           CASE WHEN r.bytes <= $6 THEN r.lines ELSE '[]'::jsonb END,
           CASE WHEN r.bytes <= $6 THEN r.bytes ELSE 0 END,
           r.dropped + CASE WHEN r.bytes <= $6 THEN 0 ELSE jsonb_array_length(r.lines) END
    FROM ready AS r
    ON CONFLICT (job_id, attempt) DO UPDATE
    SET lines = CASE WHEN l.bytes + EXCLUDED.bytes <= $6 THEN l.lines || EXCLUDED.lines
                     ELSE l.lines END,
        dropped = l.dropped + EXCLUDED.dropped
                  + CASE WHEN l.bytes + EXCLUDED.bytes <= $6 THEN 0
                         ELSE jsonb_array_length(EXCLUDED.lines) END,
        bytes = CASE WHEN l.bytes + EXCLUDED.bytes <= $6 THEN l.bytes + EXCLUDED.bytes
                     ELSE l.bytes END
)
-- The entries held elsewhere: their attempt exists (as this statement's snapshot sees
-- it), yet they are not ready.
SELECT e.job_id, e.attempt
FROM entry AS e
WHERE NOT EXISTS (SELECT 1 FROM ready AS r
                  WHERE r.job_id = e.job_id AND r.attempt = e.attempt)
  AND EXISTS (SELECT 1 FROM hopper.jobs AS j
              WHERE j.id = e.job_id AND e.attempt BETWEEN 1 AND j.attempt)
