-- hopper's SQLite schema, version 1: jobs, nodes, and a view for people.
--
-- The same model as the PostgreSQL schema (crates/hopper-postgres/migrations/), written
-- for SQLite:
--
-- - SQLite has no schemas inside one database, so every object is prefixed `hopper_`; an
--   application may keep its own tables in the same file.
-- - Times are INTEGER microseconds since the Unix epoch (UTC): they sort and compare as
--   numbers, keep PostgreSQL's precision, and need no parsing. `hopper_job_view` shows
--   them as ISO 8601 text.
-- - Ids are UUIDs as lowercase hyphenated TEXT. For UUIDv7 the text sorts in creation
--   order, exactly as the 16 bytes do, so `ORDER BY id` is time order.
-- - JSON (args, errors, queues) is TEXT checked with json_valid().
-- - STRICT tables: SQLite refuses a value of the wrong type instead of storing it.

CREATE TABLE hopper_jobs (
    id               TEXT PRIMARY KEY NOT NULL,
    queue            TEXT NOT NULL DEFAULT 'default'
                     CHECK (length(queue) BETWEEN 1 AND 128
                            AND queue NOT GLOB '*[^A-Za-z0-9_.:-]*'),
    kind             TEXT NOT NULL
                     CHECK (length(kind) BETWEEN 1 AND 128
                            AND kind NOT GLOB '*[^A-Za-z0-9_.:-]*'),
    args             TEXT NOT NULL DEFAULT '{}'
                     CHECK (json_valid(args) AND json_type(args) IN ('object', 'array')),
    state            TEXT NOT NULL DEFAULT 'available'
                     CHECK (state IN ('scheduled', 'available', 'running',
                                      'completed', 'failed', 'cancelled')),
    -- Lower runs first: 1 high, 2 normal, 3 low.
    priority         INTEGER NOT NULL DEFAULT 2 CHECK (priority BETWEEN -32768 AND 32767),
    run_at           INTEGER NOT NULL,
    -- Incremented by every claim: (id, attempt) is the lease, the fencing token.
    attempt          INTEGER NOT NULL DEFAULT 0,
    -- Claims that do not count against max_attempts (snoozes, releases, manual retries).
    uncounted        INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL DEFAULT 25 CHECK (max_attempts > 0),
    timeout_ms       INTEGER NOT NULL DEFAULT 1800000
                     CHECK (timeout_ms BETWEEN 1 AND 2147483647),
    node_id          TEXT,
    lease_expires_at INTEGER,
    created_at       INTEGER NOT NULL,
    attempted_at     INTEGER,
    finished_at      INTEGER,
    duration_ms      INTEGER,
    -- One object per failed attempt: {attempt, at, error, node, duration_ms}.
    errors           TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(errors))
) STRICT;

-- The claim index. Only available jobs are in it, so it stays as small as the ready
-- backlog, and a claim reads its first entries for one queue in (priority, run_at, id)
-- order: the cost of a claim does not grow with history, nor with jobs scheduled for later.
CREATE INDEX hopper_jobs_claim_idx ON hopper_jobs (queue, priority, run_at, id)
    WHERE state = 'available';

-- Scheduled jobs by due time, for the promoter.
CREATE INDEX hopper_jobs_scheduled_idx ON hopper_jobs (run_at)
    WHERE state = 'scheduled';

-- Running jobs by lease expiry, for the rescuer.
CREATE INDEX hopper_jobs_running_idx ON hopper_jobs (lease_expires_at)
    WHERE state = 'running';

-- Running jobs by node, for releasing a dead node's jobs at once.
CREATE INDEX hopper_jobs_node_idx ON hopper_jobs (node_id)
    WHERE state = 'running';

CREATE TABLE hopper_nodes (
    id           TEXT PRIMARY KEY NOT NULL,
    name         TEXT NOT NULL,
    -- A JSON array of queue names.
    queues       TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(queues)),
    concurrency  INTEGER NOT NULL DEFAULT 0,
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL
) STRICT;

-- What people query with the sqlite3 shell: every job, times as ISO 8601 text (UTC,
-- millisecond precision), attempts used, the latest error.
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
       errors ->> '$[#-1].error' AS last_error
FROM hopper_jobs;
