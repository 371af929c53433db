-- What finished in each minute of the window: $1 window in milliseconds, $2 now (NULL: the
-- database's clock). Latency is due-to-start of the last attempt (attempted_at - run_at);
-- duration is the successful run's. There is no index on finished_at (it would cost every
-- completion a non-HOT update), so this reads the table: an admin query, polled by the
-- dashboard every few seconds, bounded in cost by retention.
SELECT date_trunc('minute', finished_at) AS minute,
       count(*) FILTER (WHERE state = 'completed'),
       count(*) FILTER (WHERE state = 'failed'),
       coalesce(avg(extract(epoch FROM attempted_at - run_at) * 1000), 0)::float8,
       coalesce(percentile_cont(0.95) WITHIN GROUP (
           ORDER BY extract(epoch FROM attempted_at - run_at) * 1000), 0)::float8,
       coalesce(avg(duration_ms) FILTER (WHERE state = 'completed'), 0)::float8,
       coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ms)
           FILTER (WHERE state = 'completed'), 0)::float8
FROM hopper.jobs
WHERE state IN ('completed', 'failed')
  AND finished_at >= coalesce($2::timestamptz, now()) - make_interval(secs => $1::bigint / 1000.0)
  AND finished_at <= coalesce($2::timestamptz, now())
GROUP BY 1
ORDER BY 1
