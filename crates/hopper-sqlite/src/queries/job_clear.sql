-- Deletes the jobs of one queue (:queue) or of all queues (NULL), except running ones.
DELETE FROM hopper_jobs
WHERE (:queue IS NULL OR queue = :queue)
  AND state <> 'running'
