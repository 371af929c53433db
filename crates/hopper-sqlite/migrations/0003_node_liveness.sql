-- hopper's SQLite schema, version 3: node liveness (docs/reliability.md). A node that
-- holds an OS lock on a file of its own records the file's path here; the operating system
-- releases the lock when the process ends, however it ends, so other processes on the
-- same database see at once that the node is gone. NULL: the node is found dead by its
-- silent heartbeat only.
ALTER TABLE hopper_nodes ADD COLUMN lock_path TEXT;
