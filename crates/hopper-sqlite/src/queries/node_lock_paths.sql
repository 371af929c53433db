-- The registered holders of a lock file, for the vanished-node check.
SELECT id, lock_path FROM hopper_nodes WHERE lock_path IS NOT NULL
