-- Every registered node, for operators (hopper nodes, GET /api/v1/nodes): a few rows,
-- read whole. Times are microseconds since the epoch; queues a JSON array.
SELECT id, name, queues, concurrency, started_at, heartbeat_at
FROM hopper_nodes
ORDER BY name, id
