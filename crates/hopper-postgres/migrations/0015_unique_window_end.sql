-- hopper's schema, version 15: the end of a job's unique window, stored with it.
--
-- A unique window keeps its key taken after the job finished, for the rest of the window
-- (jobs_unique_window_idx holds finished jobs too). Pruning deleted a finished job once its
-- state's retention ran out, however long its window still had to run, and a second job
-- of the key then went in within the same window. The window's start alone does not say
-- when it ends (its length is the inserter's), so the end is stored beside it, and
-- job_prune.sql keeps a finished job until then. NULL: no window, or a job inserted
-- before this version (pruned by its retention alone, as before).
ALTER TABLE hopper.jobs
    ADD COLUMN unique_until timestamptz;
