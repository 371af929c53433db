-- MaintenanceStore::job_attempts_of_node, run once per lease: whether the lease (:id,
-- :attempt) is its job's latest attempt and was made under node :node, whatever the job's
-- state now. A server asks it of the leases a worker logs for that none of its peers holds
-- (lines sent after the outcome, resent after a reconnect or a restart): a node's workers
-- may add lines to the latest attempt of a job that ran under it, never to another node's.
-- Index: the primary key.
SELECT 1
FROM hopper_jobs
WHERE id = :id
  AND attempt = :attempt
  AND node_id = :node
