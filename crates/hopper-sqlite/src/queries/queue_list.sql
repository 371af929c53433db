-- Every queue that has settings, by name; with :queue, only that one (the claim reads it
-- inside its transaction: a primary-key probe, so no cache is needed).
SELECT name, paused, grouped, max_running, max_running_per_group,
       rate_limit, rate_interval_ms, rate_burst, rate_tokens, rate_refilled_at
FROM hopper_queues
WHERE (:queue IS NULL OR name = :queue)
ORDER BY name
