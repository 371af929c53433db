-- Records one failed attempt; `job_finish_many` runs it once per failure, all in one
-- transaction. A failure is retried after :retry_us unless it is permanent or the job has
-- used all its attempts, in which case the job is dead-lettered ('failed'). Every failure
-- is appended to the job's error history, which keeps the latest entries
-- (error_history_pushed, registered by functions.rs). The SET expressions all read
-- the row as it was before the update, as in PostgreSQL. No row returned means the lease was lost.
UPDATE hopper_jobs
SET state = CASE
        WHEN :permanent OR attempt - uncounted >= max_attempts THEN 'failed'
        WHEN :retry_us > 0 THEN 'scheduled'
        ELSE 'available'
    END,
    run_at = CASE
        WHEN :permanent OR attempt - uncounted >= max_attempts THEN run_at
        ELSE :now + :retry_us
    END,
    finished_at = CASE
        WHEN :permanent OR attempt - uncounted >= max_attempts THEN :now
    END,
    lease_expires_at = NULL,
    errors = error_history_pushed(errors, json_object(
        'attempt', attempt,
        'at', :now_text,
        'error', :error,
        'node', node_id,
        'duration_ms', :duration_ms))
WHERE id = :id
  AND attempt = :attempt
  AND state = 'running'
RETURNING state, queue
