-- Counts by queue and state. Reads the whole table: an admin query, not a hot one.
SELECT queue,
       count(*) FILTER (WHERE state = 'available'),
       count(*) FILTER (WHERE state = 'scheduled'),
       count(*) FILTER (WHERE state = 'running'),
       count(*) FILTER (WHERE state = 'completed'),
       count(*) FILTER (WHERE state = 'failed'),
       count(*) FILTER (WHERE state = 'cancelled'),
       coalesce(extract(epoch FROM coalesce($1::timestamptz, now())
                - min(run_at) FILTER (WHERE state = 'available')), 0)::float8
FROM hopper.jobs
GROUP BY queue
ORDER BY queue
