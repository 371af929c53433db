-- Node liveness (docs/reliability.md): a node that holds a session-level advisory lock on
-- a dedicated connection records the lock's key here. PostgreSQL releases the lock the
-- moment that session ends, so other nodes see at once that the node is gone
-- (node_release_vanished.sql). NULL: the node is found dead by its silent heartbeat only.
ALTER TABLE hopper.nodes ADD COLUMN liveness_key bigint;
