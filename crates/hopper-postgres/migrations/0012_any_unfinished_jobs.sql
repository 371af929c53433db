-- hopper.any_unfinished_jobs(): whether any job is not finished yet (scheduled, available
-- or running, in any queue), for a poll that waits for a queue to drain.
--
-- unfinished_jobs() counts: it reads every entry of the three partial indexes, so its cost
-- grows with the backlog (4.5 ms of CPU halfway through 100,000 jobs). This reads at most
-- the first live entry of each (jobs_claim_idx, jobs_running_idx, jobs_scheduled_idx),
-- stopping at the first state that has one, so its cost stays that of one index probe
-- whatever the backlog. The entries ahead of the first live one are those of jobs claimed
-- or finished since the last vacuum; the claims that walk the same index mark them dead,
-- and an index scan steps over dead entries without reading the table.
--
-- The settings are unfinished_jobs()'s, for the same reason: on a table whose statistics
-- still say it is full, the planner may look for the first available job by a sequential
-- scan, which in a draining table reads every finished row before it finds one.

CREATE FUNCTION hopper.any_unfinished_jobs() RETURNS boolean
LANGUAGE sql STABLE
SET max_parallel_workers_per_gather = 0
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
    SELECT EXISTS (SELECT FROM hopper.jobs WHERE state = 'available')
        OR EXISTS (SELECT FROM hopper.jobs WHERE state = 'running')
        OR EXISTS (SELECT FROM hopper.jobs WHERE state = 'scheduled')
$$;
