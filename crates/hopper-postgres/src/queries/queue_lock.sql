-- First statement of a limited claim: locks the queue's settings row, so claimers of a
-- limited queue take turns across every node, and reads the limits and the rate bucket.
-- The claim that follows runs as a second statement of the same transaction: its snapshot
-- is taken after this lock was granted, so it sees every job the previous holder claimed
-- (counting running jobs in the same statement as the lock would miss them: that
-- statement's snapshot predates the wait). Queues without limits never come here.
-- $1 queue, $2 now (NULL: the database's clock; clock_timestamp(), not now(), since now()
-- is the start of a transaction that may have waited for the lock).
-- A refill time hopper cannot read (written by hand: `infinity`, beyond year 9999) is read
-- as never refilled, a full bucket, rather than fail every claim of the queue.
SELECT paused, max_running, max_running_per_group, rate_limit, rate_interval_ms,
       rate_burst, rate_tokens,
       CASE WHEN rate_refilled_at BETWEEN timestamptz '1970-01-01 00:00:00+00'
                                      AND timestamptz '9999-12-31 23:59:59.999999+00'
            THEN rate_refilled_at END,
       coalesce($2::timestamptz, clock_timestamp())
FROM hopper.queues
WHERE name = $1
FOR UPDATE
