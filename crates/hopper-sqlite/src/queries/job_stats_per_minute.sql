-- The jobs that finished between :since and :now, oldest first, with what the per-minute
-- statistics are made of: when, how (completed or failed), the wait from due to the start
-- of the last attempt, and the successful run's duration, in milliseconds. SQLite has no
-- percentile_cont, so the backend groups these rows by minute and computes the means and
-- 95th percentiles itself, exactly as PostgreSQL's job_stats_per_minute.sql does in SQL.
-- There is no index on finished_at (it would cost every completion an index update), so
-- this reads the table: an admin query, polled by the dashboard, bounded by retention.
SELECT finished_at,
       state = 'completed',
       (attempted_at - run_at) / 1000.0,
       duration_ms
FROM hopper_jobs
WHERE state IN ('completed', 'failed')
  AND finished_at >= :since
  AND finished_at <= :now
ORDER BY finished_at
