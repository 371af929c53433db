-- Per-job logs (docs/job-meta-and-logs.md): the lines a handler writes during an attempt,
-- one row per (job, attempt), in a table of their own so that the job row, which every
-- claim, heartbeat and outcome rewrites, stays small; a job without logs costs nothing
-- here. `bytes` is the JSON size of the lines kept; job_log_append.sql keeps it within the
-- bound of hopper_core::job_log (64 KiB) and counts the lines past it in `dropped`.
--
-- ON DELETE CASCADE: deleting or pruning a job deletes its logs, through this primary key
-- (one index probe per deleted job, nothing to scan).
CREATE TABLE hopper.job_logs (
    job_id  uuid NOT NULL REFERENCES hopper.jobs (id) ON DELETE CASCADE,
    attempt integer NOT NULL,
    lines   jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(lines) = 'array'),
    bytes   integer NOT NULL DEFAULT 0,
    dropped bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, attempt)
);
