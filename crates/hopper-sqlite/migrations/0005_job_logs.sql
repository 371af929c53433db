-- hopper's SQLite schema, version 5: per-job logs (docs/job-meta-and-logs.md), one row per
-- (job, attempt) in a table of their own so the job row stays small. `bytes` is the JSON
-- size of the lines kept, held within hopper_core::job_log's bound by job_log_append.sql;
-- `dropped` counts the lines past it. A trigger deletes a job's logs with the job
-- (foreign keys need a pragma per connection; the trigger does not), through the
-- primary key.
CREATE TABLE hopper_job_logs (
    job_id  TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    lines   TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(lines)),
    bytes   INTEGER NOT NULL DEFAULT 0,
    dropped INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, attempt)
) STRICT, WITHOUT ROWID;

CREATE TRIGGER hopper_job_logs_follow_jobs AFTER DELETE ON hopper_jobs
BEGIN
    DELETE FROM hopper_job_logs WHERE job_id = old.id;
END;
