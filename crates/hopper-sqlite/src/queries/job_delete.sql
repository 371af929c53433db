-- Deletes one job unless it is running (a running job is cancelled first, so that its
-- worker is told). No row back: no such job, or it is running; the caller tells which,
-- in the same transaction.
DELETE FROM hopper_jobs
WHERE id = :id
  AND state <> 'running'
RETURNING id
