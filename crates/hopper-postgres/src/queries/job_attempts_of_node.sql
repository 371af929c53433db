-- MaintenanceStore::job_attempts_of_node: of the leases ($1 ids, $2 attempts), those that
-- are their job's latest attempt and were made under node $3, whatever the job's state
-- now. A server asks it of the leases a worker logs for that none of its peers holds (lines
-- sent after the outcome, resent after a reconnect or a restart): a node's workers may add
-- lines to the latest attempt of a job that ran under it, never to another node's job.
--
-- Index: jobs_pkey, one probe per lease (the attempt and node are tested on the row found).
SELECT j.id, j.attempt
FROM unnest($1::uuid[], $2::integer[]) AS f(id, attempt)
JOIN hopper.jobs AS j ON j.id = f.id AND j.attempt = f.attempt
WHERE j.node_id = $3
