-- Registers a node, or refreshes its heartbeat, queues and concurrency.
INSERT INTO hopper_nodes (id, name, queues, concurrency, started_at, heartbeat_at)
VALUES (:id, :name, :queues, :concurrency, :now, :now)
ON CONFLICT (id) DO UPDATE
SET heartbeat_at = excluded.heartbeat_at,
    queues = excluded.queues,
    concurrency = excluded.concurrency
