-- First statement of a limited claim: locks the queue's settings row, so claimers of a
-- limited queue take turns across every node, and reads the limits and the rate bucket.
-- The claim that follows runs as a second statement of the same transaction: its snapshot
-- is taken after this lock was granted, so it sees every job the previous holder claimed
-- (counting running jobs in the same statement as the lock would miss them: that
-- statement's snapshot predates the wait). Queues without limits never come here.
-- $1 queue, $2 now (NULL: the database's clock; clock_timestamp(), not now(), since now()
-- is the start of a transaction that may have waited for the lock).
SELECT paused, max_running, max_running_per_group, rate_limit, rate_interval_ms,
       rate_burst, rate_tokens, rate_refilled_at,
       coalesce($2::timestamptz, clock_timestamp())
FROM hopper.queues
WHERE name = $1
FOR UPDATE
