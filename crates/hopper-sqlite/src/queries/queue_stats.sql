-- Counts by queue and state. Reads the whole table: an admin query, not a hot one.
SELECT queue,
       count(*) FILTER (WHERE state = 'available'),
       count(*) FILTER (WHERE state = 'scheduled'),
       count(*) FILTER (WHERE state = 'running'),
       count(*) FILTER (WHERE state = 'completed'),
       count(*) FILTER (WHERE state = 'failed'),
       count(*) FILTER (WHERE state = 'cancelled'),
       coalesce((:now - min(run_at) FILTER (WHERE state = 'available')) / 1000000.0, 0.0)
FROM hopper_jobs
GROUP BY queue
ORDER BY queue
