-- Every queue's settings, for the workers' cache (tiny table; read about twice a second
-- per process, and at once after a NOTIFY 'q:<queue>').
SELECT name, paused, grouped, max_running, max_running_per_group,
       rate_limit, rate_interval_ms, rate_burst
FROM hopper.queues
ORDER BY name
