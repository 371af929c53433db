-- The 'replace' unique policy: updates the job holding a key with a new job's fields, if
-- it is still waiting (scheduled or available). The queue and the id stay; the new job's
-- metadata replaces the holder's, like its arguments.
UPDATE hopper_jobs
SET kind = :kind,
    args = :args,
    priority = :priority,
    run_at = :run_at,
    state = CASE WHEN :run_at > :now THEN 'scheduled' ELSE 'available' END,
    max_attempts = :max_attempts,
    timeout_ms = :timeout_ms,
    group_key = coalesce(:group_key, group_key),
    meta = :meta
WHERE id = :id
  AND state IN ('scheduled', 'available')
RETURNING state, queue
