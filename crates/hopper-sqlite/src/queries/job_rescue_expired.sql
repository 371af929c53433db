-- Takes back jobs whose lease expired: the worker vanished or hung. The attempt counts as
-- failed (reason recorded); the job runs again at once, or is dead-lettered if that was its
-- last attempt. 1,000 at most per call. Index: hopper_jobs_running_idx (lease_expires_at)
-- WHERE state = 'running', which holds the NULLs too. A running row without a lease
-- (written by hand: hopper never leaves one) is taken back as expired, or it would hold
-- its queue's concurrency for ever. The error history keeps the latest entries, as
-- in job_fail_many.sql.
UPDATE hopper_jobs
SET state = CASE WHEN attempt - uncounted >= max_attempts
                 THEN 'failed' ELSE 'available' END,
    finished_at = CASE WHEN attempt - uncounted >= max_attempts THEN :now END,
    run_at = :now,
    errors = error_history_pushed(errors, json_object(
        'attempt', attempt,
        'at', :now_text,
        'error', CASE WHEN lease_expires_at IS NULL
                      THEN 'running without a lease: taken back'
                      ELSE 'lease expired at '
                           || strftime('%Y-%m-%dT%H:%M:%fZ', lease_expires_at / 1000000.0, 'unixepoch')
                           || ': the worker vanished or stopped heartbeating' END,
        'node', node_id,
        'duration_ms', NULL)),
    lease_expires_at = NULL
WHERE id IN (
    SELECT id
    FROM hopper_jobs
    WHERE state = 'running'
      AND (lease_expires_at < :now OR lease_expires_at IS NULL)
    ORDER BY lease_expires_at
    LIMIT 1000
)
RETURNING queue, state
