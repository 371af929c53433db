-- LogStore::job_logs_page: the logs of the attempts of :job_id after attempt :after,
-- oldest attempt first, at most :limit of them (one page; an attempt's log is at most
-- 64 KiB).
-- Index: the primary key (job_id, attempt): a range scan from (job_id, :after), stopped
-- by the limit.
SELECT attempt, lines, dropped
FROM hopper_job_logs
WHERE job_id = :job_id AND attempt > :after
ORDER BY attempt
LIMIT :limit
