-- The registered holders of a lock file whose heartbeat is older than :dead_before: with
-- i64::MAX, every holder, for the vanished-node check; else the silent ones, whose lock
-- the release of silent nodes looks at (a held lock means a live node).
SELECT id, lock_path FROM hopper_nodes WHERE lock_path IS NOT NULL AND heartbeat_at < :dead_before
