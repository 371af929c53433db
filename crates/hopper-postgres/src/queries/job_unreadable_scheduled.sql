-- Scheduled jobs whose run_at lies outside the range of hopper_core::limits (infinite, or
-- beyond what hopper reads): the promoter hands them to job_quarantine.sql.
-- Index: jobs_scheduled_idx (run_at) WHERE scheduled, a range scan at each end.
SELECT id, run_at::text
FROM hopper.jobs
WHERE state = 'scheduled'
  AND (run_at < timestamptz '1970-01-01 00:00:00+00'
       OR run_at > timestamptz '9999-12-31 23:59:59.999999+00')
LIMIT 1000
