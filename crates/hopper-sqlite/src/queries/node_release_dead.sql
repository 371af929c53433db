-- Both statements run in one `BEGIN IMMEDIATE` transaction, so no heartbeat can land
-- between them.
--
-- Statement 1: releases at once every running job of dead nodes (seed 004's node lock
-- key): those whose heartbeat stopped before :dead_before, except the nodes of :spared (a
-- JSON array of ids: silent nodes whose lock file another process holds, so they live),
-- or node :id, whose lock file the caller found free and holds (its process ended), or
-- which is stopping (Backend::node_deregister: what still runs under it after its last
-- outcome was written). Each release counts as a failed attempt, as for an expired lease;
-- :reason says which it was. No job can be skipped here (SQLite has no row locks, and
-- this transaction is the only writer), so statement 2 forgets each node with its last
-- running job: none is left running under a node nobody looks at. The error history
-- keeps the latest entries, as in job_fail_many.sql.
-- Index: hopper_jobs_node_idx (node_id) WHERE state = 'running'.
UPDATE hopper_jobs
SET state = CASE WHEN attempt - uncounted >= max_attempts
                 THEN 'failed' ELSE 'available' END,
    finished_at = CASE WHEN attempt - uncounted >= max_attempts THEN :now END,
    run_at = :now,
    errors = error_history_pushed(errors, json_object(
        'attempt', attempt,
        'at', :now_text,
        'error', 'node ' || node_id || :reason,
        'node', node_id,
        'duration_ms', NULL)),
    lease_expires_at = NULL
WHERE state = 'running'
  AND node_id IN (SELECT id FROM hopper_nodes
                  WHERE heartbeat_at < :dead_before
                        AND id NOT IN (SELECT value FROM json_each(:spared))
                     OR id = :id)
RETURNING queue, state;

-- Statement 2: forgets those nodes.
DELETE FROM hopper_nodes
WHERE heartbeat_at < :dead_before AND id NOT IN (SELECT value FROM json_each(:spared))
   OR id = :id;
