-- hopper's SQLite schema, version 6: the end of a job's unique window, stored with it
-- (µs), as PostgreSQL's migration 0015 does. A unique window keeps its key taken after the
-- job finished, for the rest of the window; pruning deleted a finished job once its
-- state's retention ran out, and a second job of the key then went in within the same
-- window. job_prune.sql keeps a finished job until unique_until. NULL: no window, or a
-- job inserted before this version (pruned by its retention alone, as before).
ALTER TABLE hopper_jobs ADD COLUMN unique_until INTEGER;
