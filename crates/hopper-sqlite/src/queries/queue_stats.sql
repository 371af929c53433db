-- Counts by queue and state. Reads the whole table: an admin query, not a hot one. The age
-- of the oldest available job ignores a run_at outside the range of hopper_core::limits
-- (a row written by hand, failed when it is next claimed or listed: poison.rs).
SELECT queue,
       count(*) FILTER (WHERE state = 'available'),
       count(*) FILTER (WHERE state = 'scheduled'),
       count(*) FILTER (WHERE state = 'running'),
       count(*) FILTER (WHERE state = 'completed'),
       count(*) FILTER (WHERE state = 'failed'),
       count(*) FILTER (WHERE state = 'cancelled'),
       coalesce((:now - min(run_at) FILTER (
           WHERE state = 'available' AND run_at BETWEEN 0 AND 253402300799999999)) / 1000000.0, 0.0)
FROM hopper_jobs
GROUP BY queue
ORDER BY queue
