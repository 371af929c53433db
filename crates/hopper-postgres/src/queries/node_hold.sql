-- Takes the node's liveness lock on this session (the caller's dedicated connection), then
-- registers the node as its holder. The lock comes first, so a row with a key always
-- names a lock that was held. A session lock outlives a failed statement: the caller
-- closes the connection if this fails. No row comes back if the lock is held elsewhere
-- (by the node's own earlier session not yet ended, or by a release of this node in
-- progress, node_release_vanished.sql). A row another transaction holds is waited for,
-- and then written with the time of the write, as node_heartbeat.sql says why.
-- $1 id, $2 name, $3 queues, $4 concurrency, $5 now.
WITH lock AS (
    SELECT key, pg_try_advisory_lock(key) AS held
    FROM (SELECT hashtextextended('hopper node ' || $1::uuid::text, 0) AS key) AS k
)
INSERT INTO hopper.nodes (id, name, queues, concurrency, started_at, heartbeat_at,
                          liveness_key, liveness_epoch)
SELECT $1, $2, $3, $4, coalesce($5::timestamptz, now()), coalesce($5::timestamptz, now()),
       key, pg_postmaster_start_time()
FROM lock
WHERE held
ON CONFLICT (id) DO UPDATE
SET heartbeat_at = coalesce($5::timestamptz, clock_timestamp()),
    queues = excluded.queues,
    concurrency = excluded.concurrency,
    liveness_key = excluded.liveness_key,
    liveness_epoch = excluded.liveness_epoch
RETURNING liveness_key
