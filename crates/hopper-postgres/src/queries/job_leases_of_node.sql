-- MaintenanceStore::job_leases_of_node: of the leases ($1 ids, $2 attempts), those running
-- under node $3. A server asks it of the leases a worker reports or extends that none of
-- its peers holds (a restart's): only its own node's are its to touch.
--
-- Index: jobs_pkey, one probe per lease. The state is tested as text for the reason
-- job_complete_many.sql gives.
SELECT j.id, j.attempt
FROM unnest($1::uuid[], $2::integer[]) AS f(id, attempt)
JOIN hopper.jobs AS j ON j.id = f.id AND j.attempt = f.attempt
WHERE j.state::text = 'running'
  AND j.node_id = $3
