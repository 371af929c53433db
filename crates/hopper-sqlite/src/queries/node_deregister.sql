-- Forgets a node that shut down cleanly; returns the lock file it held (if any), which the
-- caller deletes.
DELETE FROM hopper_nodes WHERE id = :id
RETURNING lock_path
