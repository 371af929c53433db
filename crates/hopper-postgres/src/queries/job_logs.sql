-- LogStore::job_logs: every attempt's log of one job, oldest attempt first.
-- Index: the primary key (job_id, attempt).
SELECT attempt, lines, dropped
FROM hopper.job_logs
WHERE job_id = $1
ORDER BY attempt
