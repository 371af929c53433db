-- Makes due scheduled jobs available, 1,000 at a time (the caller repeats while full), and
-- wakes the queues that got jobs. Index: jobs_scheduled_idx (run_at) WHERE scheduled.
-- $1 now.
WITH due AS (
    SELECT id
    FROM hopper.jobs
    WHERE state = 'scheduled'
      AND run_at <= coalesce($1::timestamptz, now())
    ORDER BY run_at
    LIMIT 1000
    FOR UPDATE SKIP LOCKED
),
promoted AS (
    UPDATE hopper.jobs AS j
    SET state = 'available'
    FROM due
    WHERE j.id = due.id
    RETURNING j.queue
),
woken AS (
    SELECT pg_notify('hopper_wake', 'a:' || queue)
    FROM (SELECT DISTINCT queue FROM promoted) AS q
)
SELECT (SELECT count(*) FROM promoted),
       (SELECT count(*) FROM woken),
       (SELECT min(run_at) FROM hopper.jobs
         WHERE state = 'scheduled' AND run_at > coalesce($1::timestamptz, now()))
