-- The arguments, metadata and error history of jobs whose rows could not be read, as
-- text, for the quarantine to see whether serde_json reads them: jsonb holds what it does
-- not (a number beyond a double's range such as 1e400, nesting deeper than its 128
-- levels, an error entry whose `at` is no instant). Rare: only rows that failed to decode
-- come here. $1 ids. Index: jobs_pkey, one probe per id.
SELECT id, args::text, meta::text, errors::text
FROM hopper.jobs
WHERE id = ANY ($1::uuid[])
