-- Registers or refreshes one periodic job. A changed schedule or time zone takes the new
-- next_run_at; an unchanged one keeps the stored one, so restarting a runtime neither
-- skips nor repeats a tick.
INSERT INTO hopper_cron_jobs AS c (name, schedule, timezone, queue, kind, args, priority,
                                   max_attempts, timeout_ms, catch_up, next_run_at,
                                   registered_at, seen_at)
VALUES (:name, :schedule, :timezone, :queue, :kind, :args, :priority, :max_attempts,
        :timeout_ms, :catch_up, :next_run_at, :now, :now)
ON CONFLICT (name) DO UPDATE
SET next_run_at = CASE WHEN c.schedule = excluded.schedule AND c.timezone = excluded.timezone
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
