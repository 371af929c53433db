-- Locks the row of node $1, which stops, for the transaction that then releases what still
-- runs under it and forgets it (node_release_dead.sql with $5). That statement skips a node
-- row another transaction holds, as every node's check of dead nodes must; a node that
-- stops waits for its own instead (the runtime bounds the wait), so that its row goes once
-- it is free. Index: nodes_pkey.
SELECT 1 FROM hopper.nodes WHERE id = $1 FOR UPDATE
