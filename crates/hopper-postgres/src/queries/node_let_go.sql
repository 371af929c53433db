-- Keeps node $1 registered but no longer as the holder of a liveness lock (NodeLiveness::
-- node_let_go): a `hopper serve` that stops on purpose, whose successor under the same id
-- takes up its jobs. Run while the node still holds its lock. Index: nodes_pkey.
UPDATE hopper.nodes
SET liveness_key = NULL,
    liveness_epoch = NULL
WHERE id = $1
