-- Keeps node :id registered but no longer as the holder of a lock file
-- (NodeLiveness::node_let_go). Run while the node still holds its lock. Index: the
-- primary key.

-- Statement 1: the file, which the caller deletes once the row no longer names it.
SELECT lock_path
FROM hopper_nodes
WHERE id = :id;

-- Statement 2: the node is a holder no more.
UPDATE hopper_nodes
SET lock_path = NULL
WHERE id = :id;
