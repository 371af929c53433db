-- What finished in each minute of the window: $1 window in milliseconds, $2 now (NULL: the
-- database's clock). Latency is due-to-start of the last attempt (attempted_at - run_at);
-- duration is the successful run's. There is no index on finished_at (it would cost every
-- completion a non-HOT update), so this reads the table: an admin query, polled by the
-- dashboard every few seconds, bounded in cost by retention. A row written by hand with an
-- infinite run_at or attempted_at (PostgreSQL cannot subtract those) counts, but has no
-- latency; an infinite finished_at lies outside every window.
SELECT date_trunc('minute', finished_at) AS minute,
       count(*) FILTER (WHERE state = 'completed'),
       count(*) FILTER (WHERE state = 'failed'),
       coalesce(avg(latency_ms), 0)::float8,
       coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY latency_ms), 0)::float8,
       coalesce(avg(duration_ms) FILTER (WHERE state = 'completed'), 0)::float8,
       coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ms)
           FILTER (WHERE state = 'completed'), 0)::float8
FROM hopper.jobs,
     LATERAL (SELECT CASE WHEN isfinite(attempted_at) AND isfinite(run_at)
                          THEN extract(epoch FROM attempted_at - run_at) * 1000
                     END AS latency_ms) AS l
WHERE state IN ('completed', 'failed')
  AND finished_at >= coalesce($2::timestamptz, now()) - make_interval(secs => $1::bigint / 1000.0)
  AND finished_at <= coalesce($2::timestamptz, now())
GROUP BY 1
ORDER BY 1
