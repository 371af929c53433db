-- Every periodic job, by name.
SELECT name, schedule, timezone, queue, kind, args, priority, max_attempts, timeout_ms,
       catch_up, next_run_at, last_run_at, last_job_id
FROM hopper_cron_jobs
ORDER BY name
