-- Jobs of queue $1 not yet finished: what a drain waits for (W3 counts "none unfinished"
-- in the database). Polled every 20 ms while a drain runs, so it must stay cheap however
-- much history the table holds: each term reads one partial index (jobs_claim_idx,
-- jobs_scheduled_idx, jobs_running_idx), which hold only unfinished jobs. A single
-- `state IN (...)` would not match the partial indexes and would scan the table.
SELECT (SELECT count(*) FROM hopper.jobs WHERE state = 'available' AND queue = $1)
     + (SELECT count(*) FROM hopper.jobs WHERE state = 'scheduled' AND queue = $1)
     + (SELECT count(*) FROM hopper.jobs WHERE state = 'running' AND queue = $1)
