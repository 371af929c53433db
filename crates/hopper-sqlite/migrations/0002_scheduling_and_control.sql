-- hopper's SQLite schema, version 2: scheduling and control, as in PostgreSQL's 0002. Group
-- keys (tenant fairness), unique keys, per-queue settings (pause, global concurrency and
-- rate limits), periodic jobs. See docs/scheduling.md for what each piece is for.

-- The tenant a job belongs to: within a grouped queue, groups take turns. NULL: no group;
-- '' is the "no group" group of a queue that has groups (hopper_queues.grouped).
ALTER TABLE hopper_jobs ADD COLUMN group_key TEXT
    CHECK (group_key IS NULL OR (length(group_key) <= 128
                                 AND group_key NOT GLOB '*[^A-Za-z0-9_.:-]*'));

-- At most one job per unique key is scheduled, available or running at a time; with a
-- window, also at most one per key and window (µs since the epoch of the window's start),
-- finished or not. Enforced by the unique indexes below.
ALTER TABLE hopper_jobs ADD COLUMN unique_key TEXT
    CHECK (unique_key IS NULL OR length(CAST(unique_key AS BLOB)) BETWEEN 1 AND 255);
ALTER TABLE hopper_jobs ADD COLUMN unique_window INTEGER;

-- The fair claim's index: ready jobs with a group, by group, then in claim order. The claim
-- hops from group to group over it (one probe per group) and reads each group's first
-- entries. Jobs without a group are not in it.
CREATE INDEX hopper_jobs_group_claim_idx ON hopper_jobs (queue, group_key, priority, run_at, id)
    WHERE state = 'available' AND group_key IS NOT NULL;

CREATE UNIQUE INDEX hopper_jobs_unique_active_idx ON hopper_jobs (unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('scheduled', 'available', 'running');
CREATE UNIQUE INDEX hopper_jobs_unique_window_idx ON hopper_jobs (unique_key, unique_window)
    WHERE unique_window IS NOT NULL;

-- Per-queue settings. A queue without a row, or whose row sets nothing, is claimed by the
-- plain statement (job_claim.sql).
CREATE TABLE hopper_queues (
    name                  TEXT PRIMARY KEY NOT NULL
                          CHECK (length(name) BETWEEN 1 AND 128
                                 AND name NOT GLOB '*[^A-Za-z0-9_.:-]*'),
    -- No claims while paused; inserts are still accepted.
    paused                INTEGER NOT NULL DEFAULT 0,
    -- Set (once) when a job with a group is inserted: claims rotate between groups.
    grouped               INTEGER NOT NULL DEFAULT 0,
    max_running           INTEGER CHECK (max_running > 0),
    max_running_per_group INTEGER CHECK (max_running_per_group > 0),
    rate_limit            INTEGER CHECK (rate_limit > 0),
    rate_interval_ms      INTEGER CHECK (rate_interval_ms > 0),
    rate_burst            INTEGER CHECK (rate_burst > 0),
    -- The token bucket: tokens left at rate_refilled_at (µs).
    rate_tokens           REAL NOT NULL DEFAULT 0,
    rate_refilled_at      INTEGER,
    updated_at            INTEGER NOT NULL,
    CHECK ((rate_limit IS NULL) = (rate_interval_ms IS NULL))
) STRICT;

-- Periodic jobs, registered by runtimes; advancing next_run_at is a compare-and-set.
CREATE TABLE hopper_cron_jobs (
    name          TEXT PRIMARY KEY NOT NULL
                  CHECK (length(name) BETWEEN 1 AND 128 AND name NOT GLOB '*[^A-Za-z0-9_.:-]*'),
    schedule      TEXT NOT NULL,
    timezone      TEXT NOT NULL DEFAULT 'UTC',
    queue         TEXT NOT NULL,
    kind          TEXT NOT NULL,
    args          TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(args)),
    priority      INTEGER NOT NULL DEFAULT 2,
    max_attempts  INTEGER NOT NULL DEFAULT 25,
    timeout_ms    INTEGER NOT NULL DEFAULT 1800000,
    catch_up      INTEGER NOT NULL DEFAULT 0,
    next_run_at   INTEGER NOT NULL,
    last_run_at   INTEGER,
    last_job_id   TEXT,
    registered_at INTEGER NOT NULL,
    seen_at       INTEGER NOT NULL
) STRICT;

DROP VIEW hopper_job_view;
CREATE VIEW hopper_job_view AS
SELECT id, queue, kind, args, state, priority,
       strftime('%Y-%m-%dT%H:%M:%fZ', run_at / 1000000.0, 'unixepoch') AS run_at,
       attempt - uncounted AS attempts_used, max_attempts, attempt AS lease_attempt,
       node_id,
       strftime('%Y-%m-%dT%H:%M:%fZ', lease_expires_at / 1000000.0, 'unixepoch') AS lease_expires_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', created_at / 1000000.0, 'unixepoch') AS created_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', attempted_at / 1000000.0, 'unixepoch') AS attempted_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', finished_at / 1000000.0, 'unixepoch') AS finished_at,
       duration_ms,
       json_array_length(errors) AS error_count,
       errors ->> '$[#-1].error' AS last_error,
       group_key, unique_key
FROM hopper_jobs;
