-- Every registered node, for operators (hopper nodes, GET /api/v1/nodes, list_nodes): a
-- row per running process, read whole, with no index on names to page by.
-- hopper_core::node_list::page orders them (name bytes, then id) and cuts the page asked
-- for. Times are microseconds since the epoch; queues a JSON array.
SELECT id, name, queues, concurrency, started_at, heartbeat_at
FROM hopper_nodes
