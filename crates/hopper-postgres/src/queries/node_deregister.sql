DELETE FROM hopper.nodes WHERE id = $1
