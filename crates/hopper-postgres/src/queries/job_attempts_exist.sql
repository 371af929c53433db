-- LogStore::job_log_append, after an append that stored fewer entries than it was given:
-- of the (job $1, attempt $2) pairs not stored, those whose job exists and has had that
-- attempt. Their job was held by another transaction (the append skips held jobs); the
-- others belong to jobs that are gone, or name attempts never made, and are dropped.
-- Index: jobs_pkey, one probe per pair.
SELECT j.id, i.attempt
FROM unnest($1::uuid[], $2::integer[]) AS i(job_id, attempt)
JOIN hopper.jobs AS j ON j.id = i.job_id AND i.attempt BETWEEN 1 AND j.attempt
