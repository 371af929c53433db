-- Registers or refreshes one periodic job. A changed schedule or time zone takes the new
-- next_run_at; an unchanged one keeps the stored one, so restarting a runtime neither
-- skips nor repeats a tick.
-- $1 name, $2 schedule, $3 timezone, $4 queue, $5 kind, $6 args, $7 priority,
-- $8 max_attempts, $9 timeout_ms, $10 catch_up, $11 next_run_at, $12 now.
INSERT INTO hopper.cron_jobs AS c (name, schedule, timezone, queue, kind, args, priority,
                                   max_attempts, timeout_ms, catch_up, next_run_at,
                                   registered_at, seen_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11,
        coalesce($12::timestamptz, now()), coalesce($12::timestamptz, now()))
ON CONFLICT (name) DO UPDATE
SET next_run_at = CASE WHEN (c.schedule, c.timezone) = (excluded.schedule, excluded.timezone)
                       THEN c.next_run_at ELSE excluded.next_run_at END,
    schedule = excluded.schedule,
    timezone = excluded.timezone,
    queue = excluded.queue,
    kind = excluded.kind,
    args = excluded.args,
    priority = excluded.priority,
    max_attempts = excluded.max_attempts,
    timeout_ms = excluded.timeout_ms,
    catch_up = excluded.catch_up,
    seen_at = excluded.seen_at
