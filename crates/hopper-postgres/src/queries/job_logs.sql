-- LogStore::job_logs_page: the logs of the attempts of job $1 after attempt $2, oldest
-- attempt first, at most $3 of them (one page; an attempt's log is at most 64 KiB).
-- Index: the primary key (job_id, attempt): a range scan from (job_id, $2), stopped by
-- the limit.
SELECT attempt, lines, dropped
FROM hopper.job_logs
WHERE job_id = $1 AND attempt > $2
ORDER BY attempt
LIMIT $3
