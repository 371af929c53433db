-- Cancels an unfinished job. A running job's lease is revoked by the state change (its
-- worker's outcome will be refused) and its node is told through the wake channel.
WITH cancelled AS (
    UPDATE hopper.jobs
    SET state = 'cancelled',
        finished_at = coalesce($2::timestamptz, now()),
        lease_expires_at = NULL
    WHERE id = $1
      AND state IN ('scheduled', 'available', 'running')
    RETURNING id
)
SELECT pg_notify('hopper_wake', 'c:' || id::text) FROM cancelled
