-- LogStore::job_log_append, once per attempt (the caller merges appends of one attempt):
-- :lines (a JSON array) of :bytes, and :dropped lines the writer dropped, added to the
-- log of (:job_id, :attempt) unless they would take it past :bound bytes; then they are
-- counted in `dropped` instead. Nothing for a job that no longer exists, nor for an
-- attempt it has not had: a job has at most one log per attempt it made.
-- Index: the primary key (job_id, attempt).
INSERT INTO hopper_job_logs (job_id, attempt, lines, bytes, dropped)
SELECT :job_id, :attempt,
       CASE WHEN :bytes <= :bound THEN json(:lines) ELSE '[]' END,
       CASE WHEN :bytes <= :bound THEN :bytes ELSE 0 END,
       :dropped + CASE WHEN :bytes <= :bound THEN 0 ELSE json_array_length(:lines) END
WHERE EXISTS (SELECT 1 FROM hopper_jobs WHERE id = :job_id AND :attempt BETWEEN 1 AND attempt)
ON CONFLICT (job_id, attempt) DO UPDATE
SET lines = CASE WHEN bytes + excluded.bytes > :bound THEN lines
                 WHEN json_array_length(lines) = 0 THEN json(:lines)
                 WHEN json_array_length(:lines) = 0 THEN lines
                 -- Two minified arrays spliced: '[a,b]' and '[c]' make '[a,b,c]'.
                 ELSE substr(lines, 1, length(lines) - 1) || ',' || substr(json(:lines), 2)
            END,
    dropped = dropped + :dropped
              + CASE WHEN bytes + excluded.bytes <= :bound THEN 0
                     ELSE json_array_length(:lines) END,
    bytes = CASE WHEN bytes + excluded.bytes <= :bound THEN bytes + excluded.bytes
                 ELSE bytes END
