-- How many jobs of queue $1 are not yet finished: a drain's starting point and its
-- progress bar. Each term reads one partial index (jobs_claim_idx, jobs_scheduled_idx,
-- jobs_running_idx), which hold only unfinished jobs, so finished history costs nothing;
-- a single `state IN (...)` would match none of them and scan the table.
SELECT (SELECT count(*) FROM hopper.jobs
        WHERE state = 'available' AND hashtextextended(queue, 0) = hashtextextended($1, 0)
          AND queue = $1)
     + (SELECT count(*) FROM hopper.jobs WHERE state = 'scheduled' AND queue = $1)
     + (SELECT count(*) FROM hopper.jobs WHERE state = 'running' AND queue = $1)
