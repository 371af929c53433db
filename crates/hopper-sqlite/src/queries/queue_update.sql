-- Creates or changes one queue's settings. :paused NULL leaves it as it is; for each limit
-- a flag says "change it" and the value (NULL: remove it). A new or changed rate starts
-- with a full bucket; setting the rate it already has (a deploy or every node's start
-- applying its configuration) leaves the bucket as it is, or each repetition would let
-- another burst through.
INSERT INTO hopper_queues AS q (name, paused, max_running, max_running_per_group,
                                rate_limit, rate_interval_ms, rate_burst, rate_tokens,
                                updated_at)
VALUES (:queue, coalesce(:paused, 0),
        CASE WHEN :set_max_running THEN :max_running END,
        CASE WHEN :set_max_running_per_group THEN :max_running_per_group END,
        CASE WHEN :set_rate THEN :rate_limit END,
        CASE WHEN :set_rate THEN :rate_interval_ms END,
        CASE WHEN :set_rate THEN :rate_burst END,
        coalesce(CASE WHEN :set_rate THEN :rate_burst END, 0),
        :now)
ON CONFLICT (name) DO UPDATE
SET paused = coalesce(:paused, q.paused),
    max_running = CASE WHEN :set_max_running THEN :max_running ELSE q.max_running END,
    max_running_per_group = CASE WHEN :set_max_running_per_group
                                 THEN :max_running_per_group ELSE q.max_running_per_group END,
    rate_limit = CASE WHEN :set_rate THEN :rate_limit ELSE q.rate_limit END,
    rate_interval_ms = CASE WHEN :set_rate THEN :rate_interval_ms ELSE q.rate_interval_ms END,
    rate_burst = CASE WHEN :set_rate THEN :rate_burst ELSE q.rate_burst END,
    rate_tokens = CASE WHEN :set_rate AND (q.rate_limit, q.rate_interval_ms, q.rate_burst)
                                          IS NOT (:rate_limit, :rate_interval_ms, :rate_burst)
                       THEN coalesce(:rate_burst, 0) ELSE q.rate_tokens END,
    rate_refilled_at = CASE WHEN :set_rate AND (q.rate_limit, q.rate_interval_ms, q.rate_burst)
                                               IS NOT (:rate_limit, :rate_interval_ms, :rate_burst)
                            THEN NULL ELSE q.rate_refilled_at END,
    updated_at = :now
RETURNING name, paused, grouped, max_running, max_running_per_group,
          rate_limit, rate_interval_ms, rate_burst, rate_tokens, rate_refilled_at
