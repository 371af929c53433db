-- Forgets a node that shut down cleanly.
DELETE FROM hopper_nodes WHERE id = :id
