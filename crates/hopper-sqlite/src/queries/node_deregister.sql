-- The lock file of a node that stops (if any), read in the transaction that releases what
-- still runs under the node and forgets it (node_release_dead.sql); the caller deletes the
-- file after.
SELECT lock_path FROM hopper_nodes WHERE id = :id
