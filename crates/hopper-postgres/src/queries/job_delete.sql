-- Deletes one job unless it is running (a running job is cancelled first, so that its
-- worker is told). No row back: no such job, or it is running; the caller tells which.
DELETE FROM hopper.jobs
WHERE id = $1
  AND state <> 'running'
RETURNING id
