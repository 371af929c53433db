-- Every registered node, for operators (hopper nodes, GET /api/v1/nodes, list_nodes): a
-- row per running process, read whole, with no index on names to page by.
-- hopper_core::node_list::page orders them (name bytes, then id, whatever the collation)
-- and cuts the page asked for.
SELECT id, name, queues, concurrency, started_at, heartbeat_at
FROM hopper.nodes
