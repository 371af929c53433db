-- One run of a handler: $1 job, $2 the lease's attempt, $3 worker name, $4 pid.
INSERT INTO chaos.executions (job_id, attempt, worker, pid) VALUES ($1, $2, $3, $4)
