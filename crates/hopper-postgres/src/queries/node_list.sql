-- Every registered node, for operators (hopper nodes, GET /api/v1/nodes): a few rows,
-- read whole.
SELECT id, name, queues, concurrency, started_at, heartbeat_at
FROM hopper.nodes
ORDER BY name, id
