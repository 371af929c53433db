-- Deletes the jobs of one queue ($1) or of all queues (NULL), except running ones.
DELETE FROM hopper.jobs
WHERE ($1::text IS NULL OR queue = $1)
  AND state <> 'running'
