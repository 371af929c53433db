-- Whether any job of queue $1 is unfinished: what a drain polls for (W3 ends when the
-- database holds none). Polled every 50 ms while jobs run, so it must cost next to
-- nothing: each subquery reads the first entry of one partial index (jobs_claim_idx,
-- jobs_running_idx, jobs_scheduled_idx), which hold only unfinished jobs. The ORDER BY
-- of each index is what makes the planner take it: a plain EXISTS is planned as a
-- sequential scan that stops at the first match, which near the end of a drain means
-- reading every finished job (measured: the poll then kept a backend busy beside the
-- drain). Counting instead (unfinished.sql) would read the whole backlog each time.
SELECT (SELECT true FROM hopper.jobs
        WHERE state = 'available' AND hashtextextended(queue, 0) = hashtextextended($1, 0)
          AND queue = $1
        ORDER BY priority, run_at, id LIMIT 1) IS NOT NULL
    OR (SELECT true FROM hopper.jobs
        WHERE state = 'running' AND queue = $1
        ORDER BY lease_expires_at LIMIT 1) IS NOT NULL
    OR (SELECT true FROM hopper.jobs
        WHERE state = 'scheduled' AND queue = $1
        ORDER BY run_at LIMIT 1) IS NOT NULL
