-- Whether a batch committed: its first job ($1) is expected.
SELECT 1 FROM chaos.expected WHERE job_id = $1
