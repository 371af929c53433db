-- Node liveness (docs/reliability.md): a node that holds a session-level advisory lock on
-- a dedicated connection records the lock's key here. PostgreSQL releases the lock the
-- moment that session ends, so other nodes see at once that the node is gone
-- (node_release_dead.sql). NULL: the node is found dead by its silent heartbeat only.
ALTER TABLE hopper.nodes ADD COLUMN liveness_key bigint;

-- The server the lock was taken on, by its start time (pg_postmaster_start_time()). A
-- restart, or a failover to another server, ends every session at once: locks taken
-- before it are free without their holders having died. Only a lock taken on the running
-- server counts; the others must be taken again (or the node is found dead by its
-- heartbeat).
ALTER TABLE hopper.nodes ADD COLUMN liveness_epoch timestamptz;
