-- Whether any job of queue $1 is unfinished: what a drain polls for (W3 ends when the
-- database holds none). Polled every 20 ms while jobs run, so it must cost next to
-- nothing: each EXISTS stops at the first entry of one partial index (jobs_claim_idx,
-- jobs_scheduled_idx, jobs_running_idx), which hold only unfinished jobs. Counting them
-- instead (unfinished.sql) reads the whole backlog each time: 15-60 ms for 100,000 jobs,
-- a backend kept busy beside the drain.
SELECT EXISTS (SELECT 1 FROM hopper.jobs WHERE state = 'available' AND queue = $1)
    OR EXISTS (SELECT 1 FROM hopper.jobs WHERE state = 'running' AND queue = $1)
    OR EXISTS (SELECT 1 FROM hopper.jobs WHERE state = 'scheduled' AND queue = $1)
