-- Scheduled jobs whose run_at lies outside [:min_us, :max_us], the range of
-- hopper_core::limits (written by hand, beyond what hopper reads): the promoter hands them
-- to job_quarantine.sql. Index: hopper_jobs_scheduled_idx (run_at) WHERE scheduled, a
-- range scan at each end.
SELECT id, run_at
FROM hopper_jobs
WHERE state = 'scheduled'
  AND (run_at < :min_us OR run_at > :max_us)
LIMIT 1000
