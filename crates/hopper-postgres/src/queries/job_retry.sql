-- Manual retry of a finished-unsuccessfully job: available now, with a fresh set of
-- attempts (the ones used so far stop counting). The error history is kept.
WITH retried AS (
    UPDATE hopper.jobs
    SET state = 'available',
        run_at = coalesce($2::timestamptz, now()),
        uncounted = attempt,
        finished_at = NULL
    WHERE id = $1
      AND state IN ('failed', 'cancelled')
    RETURNING queue
)
SELECT pg_notify('hopper_wake', 'a:' || queue), queue FROM retried
