-- The read half of job_claim.sql (without the locks and the update), analysed: the time and
-- pages it takes to find the first 100 ready jobs, which is what a claim pays for dead
-- index entries at the head of jobs_claim_idx.
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
SELECT id
FROM hopper.jobs
WHERE state = 'available'
  AND hashtextextended(queue, 0) = hashtextextended('default', 0)
  AND queue = 'default'
ORDER BY priority, run_at, id
LIMIT 100
