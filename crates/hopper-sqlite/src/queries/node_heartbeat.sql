-- Registers a node, or refreshes its heartbeat, queues and concurrency. :lock_path names the
-- lock file it holds (node liveness, taken before this runs); NULL keeps what is stored.
INSERT INTO hopper_nodes (id, name, queues, concurrency, started_at, heartbeat_at, lock_path)
VALUES (:id, :name, :queues, :concurrency, :now, :now, :lock_path)
ON CONFLICT (id) DO UPDATE
SET heartbeat_at = excluded.heartbeat_at,
    queues = excluded.queues,
    concurrency = excluded.concurrency,
    lock_path = coalesce(excluded.lock_path, lock_path)
