-- hopper's schema, version 1: jobs, nodes, and the public SQL API.
--
-- Every object lives in hopper's own schema. The name `hopper` below is replaced by the
-- configured schema when the migration is applied, so several hopper instances (or tests)
-- can share one database.

CREATE TYPE hopper.job_state AS ENUM (
    'scheduled',   -- waiting for run_at
    'available',   -- ready to be claimed
    'running',     -- claimed; a worker holds the lease (id, attempt)
    'completed',
    'failed',      -- dead letter: attempts exhausted or permanent failure
    'cancelled'
);

CREATE TABLE hopper.jobs (
    -- UUIDv7: time-ordered, so the primary key grows at its right edge.
    id               uuid PRIMARY KEY,
    queue            text NOT NULL DEFAULT 'default'
                     CHECK (queue ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    kind             text NOT NULL
                     CHECK (kind ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    args             jsonb NOT NULL DEFAULT '{}'
                     CHECK (jsonb_typeof(args) IN ('object', 'array')),
    state            hopper.job_state NOT NULL DEFAULT 'available',
    -- Lower runs first: 1 high, 2 normal, 3 low.
    priority         smallint NOT NULL DEFAULT 2,
    run_at           timestamptz NOT NULL DEFAULT now(),
    -- Incremented by every claim: (id, attempt) is the lease, the fencing token.
    attempt          integer NOT NULL DEFAULT 0,
    -- Claims that do not count against max_attempts (snoozes, releases, manual retries).
    uncounted        integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL DEFAULT 25 CHECK (max_attempts > 0),
    timeout_ms       integer NOT NULL DEFAULT 1800000 CHECK (timeout_ms > 0),
    node_id          uuid,
    lease_expires_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    attempted_at     timestamptz,
    finished_at      timestamptz,
    duration_ms      bigint,
    -- One object per failed attempt: {attempt, at, error, node, duration_ms}.
    errors           jsonb NOT NULL DEFAULT '[]'
);

-- The claim index. Only available jobs are in it, so it stays as small as the ready
-- backlog, and a claim reads its first entries for one queue in
-- (priority, run_at, id) order: the cost of a claim does not grow with history, nor with
-- jobs scheduled for later (those live in jobs_scheduled_idx until they are due).
CREATE INDEX jobs_claim_idx ON hopper.jobs (queue, priority, run_at, id)
    WHERE state = 'available';

-- Scheduled jobs by due time, for the promoter.
CREATE INDEX jobs_scheduled_idx ON hopper.jobs (run_at)
    WHERE state = 'scheduled';

-- Running jobs by lease expiry, for the rescuer and for releasing a dead node's jobs.
-- As small as the number of jobs running right now.
CREATE INDEX jobs_running_idx ON hopper.jobs (lease_expires_at)
    WHERE state = 'running';

CREATE TABLE hopper.nodes (
    id           uuid PRIMARY KEY,
    name         text NOT NULL,
    queues       text[] NOT NULL DEFAULT '{}',
    concurrency  integer NOT NULL DEFAULT 0,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);

-- A UUIDv7 made in SQL, for jobs enqueued from SQL: 48 bits of Unix milliseconds, then the
-- random bits of a v4 with the version nibble turned from 4 into 7.
CREATE FUNCTION hopper.uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;

-- The public SQL API: enqueue a job from SQL, a trigger, or any language with a
-- PostgreSQL driver. Returns the new job's id. Wakes idle workers when the job is due now
-- (one notification per queue per transaction: PostgreSQL folds identical ones).
CREATE FUNCTION hopper.enqueue(
    kind         text,
    args         jsonb DEFAULT '{}',
    queue        text DEFAULT 'default',
    priority     smallint DEFAULT 2,
    run_at       timestamptz DEFAULT NULL,
    max_attempts integer DEFAULT 25,
    timeout      interval DEFAULT interval '30 minutes'
) RETURNS uuid
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    new_id uuid := hopper.uuid_v7();
    due    boolean := run_at IS NULL OR run_at <= now();
BEGIN
    IF octet_length(args::text) > 1048576 THEN
        RAISE EXCEPTION 'hopper.enqueue: args are % bytes as JSON, over the limit of 1048576 bytes',
            octet_length(args::text) USING ERRCODE = '22023';
    END IF;
    INSERT INTO hopper.jobs (id, queue, kind, args, state, priority, run_at, max_attempts, timeout_ms)
    VALUES (new_id, queue, kind, args,
            CASE WHEN due THEN 'available' ELSE 'scheduled' END::hopper.job_state,
            priority, coalesce(run_at, now()), max_attempts,
            (extract(epoch FROM timeout) * 1000)::integer);
    IF due THEN
        PERFORM pg_notify('hopper_wake', 'a:' || queue);
    END IF;
    RETURN new_id;
END
$$;

-- What users query with psql: every job, with `scheduled` shown for jobs not yet due.
CREATE VIEW hopper.job_view AS
SELECT id, queue, kind, args, state, priority, run_at,
       attempt - uncounted AS attempts_used, max_attempts, attempt AS lease_attempt,
       node_id, lease_expires_at, created_at, attempted_at, finished_at, duration_ms,
       jsonb_array_length(errors) AS error_count, errors -> -1 ->> 'error' AS last_error
FROM hopper.jobs;
