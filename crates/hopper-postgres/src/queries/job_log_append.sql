-- LogStore::job_log_append: adds lines to attempts' logs, one entry per (job, attempt)
-- (the caller merges entries of the same attempt). $1 job ids, $2 attempts, $3 lines (a
-- JSON array each), $4 their JSON size, $5 lines the writer already dropped, $6 the bound
-- in bytes. Lines that would take an attempt's log past the bound are counted in
-- `dropped` instead of kept. Entries of jobs that no longer exist, or of attempts the job
-- has not had, are skipped: a job has at most one log per attempt it made.
-- Index: the primary key (job_id, attempt), for the conflict and for nothing else.
INSERT INTO hopper.job_logs AS l (job_id, attempt, lines, bytes, dropped)
SELECT i.job_id, i.attempt,
       CASE WHEN i.bytes <= $6 THEN i.lines ELSE '[]'::jsonb END,
       CASE WHEN i.bytes <= $6 THEN i.bytes ELSE 0 END,
       i.dropped + CASE WHEN i.bytes <= $6 THEN 0 ELSE jsonb_array_length(i.lines) END
FROM unnest($1::uuid[], $2::integer[], $3::jsonb[], $4::integer[], $5::bigint[])
     AS i(job_id, attempt, lines, bytes, dropped)
WHERE EXISTS (SELECT 1 FROM hopper.jobs AS j
              WHERE j.id = i.job_id AND i.attempt BETWEEN 1 AND j.attempt)
ON CONFLICT (job_id, attempt) DO UPDATE
SET lines = CASE WHEN l.bytes + EXCLUDED.bytes <= $6 THEN l.lines || EXCLUDED.lines
                 ELSE l.lines END,
    dropped = l.dropped + EXCLUDED.dropped
              + CASE WHEN l.bytes + EXCLUDED.bytes <= $6 THEN 0
                     ELSE jsonb_array_length(EXCLUDED.lines) END,
    bytes = CASE WHEN l.bytes + EXCLUDED.bytes <= $6 THEN l.bytes + EXCLUDED.bytes
                 ELSE l.bytes END
