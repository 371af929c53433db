-- A node's heartbeat: registers it, or refreshes its row. $1 id, $2 name, $3 queues,
-- $4 concurrency, $5 now.
--
-- Another transaction may hold the row (an admin's `SELECT … FOR UPDATE` or change left
-- open): this then waits, and the node's heartbeat loop goes on renewing its leases
-- meanwhile (hopper::maintenance::NodeRow). Once the row is free it is written with the
-- time of the write, clock_timestamp(), not the statement's start: a wait longer than the
-- silent-node bound must not leave a live node looking silent, to be released by
-- node_release_dead.sql (which skips the row while it is held).
INSERT INTO hopper.nodes (id, name, queues, concurrency, started_at, heartbeat_at)
VALUES ($1, $2, $3, $4, coalesce($5::timestamptz, now()), coalesce($5::timestamptz, now()))
ON CONFLICT (id) DO UPDATE
SET heartbeat_at = coalesce($5::timestamptz, clock_timestamp()),
    queues = excluded.queues,
    concurrency = excluded.concurrency
