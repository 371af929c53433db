-- Creates or changes one queue's settings and tells every node (NOTIFY 'q:<queue>', sent
-- at commit). $1 queue, $2 paused (NULL: unchanged), then for each limit a flag "change
-- it" and the new value (NULL: remove): $3/$4 max_running, $5/$6 max_running_per_group,
-- $7 change the rate, $8 rate_limit, $9 rate_interval_ms, $10 rate_burst.
-- A new or changed rate starts with a full bucket; setting the rate it already has (a
-- deploy or every node's start applying its configuration) leaves the bucket as it is,
-- or each repetition would let another burst through.
WITH saved AS (
    INSERT INTO hopper.queues AS q (name, paused, max_running, max_running_per_group,
                                    rate_limit, rate_interval_ms, rate_burst, rate_tokens)
    VALUES ($1, coalesce($2, false),
            CASE WHEN $3 THEN $4::integer END,
            CASE WHEN $5 THEN $6::integer END,
            CASE WHEN $7 THEN $8::integer END,
            CASE WHEN $7 THEN $9::integer END,
            CASE WHEN $7 THEN $10::integer END,
            coalesce(CASE WHEN $7 THEN $10::integer END, 0))
    ON CONFLICT (name) DO UPDATE
    SET paused = coalesce($2, q.paused),
        max_running = CASE WHEN $3 THEN $4::integer ELSE q.max_running END,
        max_running_per_group = CASE WHEN $5 THEN $6::integer ELSE q.max_running_per_group END,
        rate_limit = CASE WHEN $7 THEN $8::integer ELSE q.rate_limit END,
        rate_interval_ms = CASE WHEN $7 THEN $9::integer ELSE q.rate_interval_ms END,
        rate_burst = CASE WHEN $7 THEN $10::integer ELSE q.rate_burst END,
        rate_tokens = CASE WHEN $7 AND (q.rate_limit, q.rate_interval_ms, q.rate_burst)
                                       IS DISTINCT FROM ($8::integer, $9::integer, $10::integer)
                           THEN coalesce($10::integer, 0) ELSE q.rate_tokens END,
        rate_refilled_at = CASE WHEN $7 AND (q.rate_limit, q.rate_interval_ms, q.rate_burst)
                                            IS DISTINCT FROM ($8::integer, $9::integer, $10::integer)
                                THEN NULL ELSE q.rate_refilled_at END,
        updated_at = now()
    RETURNING name, paused, grouped, max_running, max_running_per_group,
              rate_limit, rate_interval_ms, rate_burst
)
SELECT saved.*, pg_notify('hopper_wake', 'q:' || saved.name) IS NULL
FROM saved
