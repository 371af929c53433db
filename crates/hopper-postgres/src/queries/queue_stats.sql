-- Counts by queue and state. Reads the whole table: an admin query, not a hot one. An
-- infinite run_at (written by hand; claims fail such jobs) would make the age infinite.
SELECT queue,
       count(*) FILTER (WHERE state = 'available'),
       count(*) FILTER (WHERE state = 'scheduled'),
       count(*) FILTER (WHERE state = 'running'),
       count(*) FILTER (WHERE state = 'completed'),
       count(*) FILTER (WHERE state = 'failed'),
       count(*) FILTER (WHERE state = 'cancelled'),
       coalesce(extract(epoch FROM coalesce($1::timestamptz, now())
                - min(run_at) FILTER (WHERE state = 'available' AND isfinite(run_at))), 0)::float8
FROM hopper.jobs
GROUP BY queue
ORDER BY queue
