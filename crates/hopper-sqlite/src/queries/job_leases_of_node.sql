-- MaintenanceStore::job_leases_of_node, run once per lease: whether the lease (:id,
-- :attempt) is running under node :node. A server asks it of the leases a worker reports
-- or extends that none of its peers holds (a restart's): only its own node's are its to
-- touch. Index: the primary key.
SELECT 1
FROM hopper_jobs
WHERE id = :id
  AND attempt = :attempt
  AND state = 'running'
  AND node_id = :node
