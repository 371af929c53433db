CREATE SCHEMA hopper;


CREATE TYPE hopper.job_state AS ENUM (
    'scheduled',
    'available',
    'running',
    'completed',
    'failed',
    'cancelled'
);


CREATE FUNCTION hopper.enqueue(kind text, args jsonb DEFAULT '{}'::jsonb, queue text DEFAULT 'default'::text, priority smallint DEFAULT 2, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, max_attempts integer DEFAULT 25, timeout interval DEFAULT '00:30:00'::interval) RETURNS uuid
    LANGUAGE plpgsql
    AS $$
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


CREATE FUNCTION hopper.uuid_v7() RETURNS uuid
    LANGUAGE sql
    AS $$
    SELECT encode(
        set_bit(set_bit(
            overlay(uuid_send(gen_random_uuid())
                    PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                    FROM 1 FOR 6),
            52, 1), 53, 1),
        'hex')::uuid
$$;



CREATE TABLE hopper.jobs (
    id uuid NOT NULL,
    queue text DEFAULT 'default'::text NOT NULL,
    kind text NOT NULL,
    args jsonb DEFAULT '{}'::jsonb NOT NULL,
    state hopper.job_state DEFAULT 'available'::hopper.job_state NOT NULL,
    priority smallint DEFAULT 2 NOT NULL,
    run_at timestamp with time zone DEFAULT now() NOT NULL,
    attempt integer DEFAULT 0 NOT NULL,
    uncounted integer DEFAULT 0 NOT NULL,
    max_attempts integer DEFAULT 25 NOT NULL,
    timeout_ms integer DEFAULT 1800000 NOT NULL,
    node_id uuid,
    lease_expires_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    attempted_at timestamp with time zone,
    finished_at timestamp with time zone,
    duration_ms bigint,
    errors jsonb DEFAULT '[]'::jsonb NOT NULL,
    CONSTRAINT jobs_args_check CHECK ((jsonb_typeof(args) = ANY (ARRAY['object'::text, 'array'::text]))),
    CONSTRAINT jobs_kind_check CHECK ((kind ~ '^[A-Za-z0-9_.:-]{1,128}$'::text)),
    CONSTRAINT jobs_max_attempts_check CHECK ((max_attempts > 0)),
    CONSTRAINT jobs_queue_check CHECK ((queue ~ '^[A-Za-z0-9_.:-]{1,128}$'::text)),
    CONSTRAINT jobs_timeout_ms_check CHECK ((timeout_ms > 0))
);


CREATE VIEW hopper.job_view AS
 SELECT jobs.id,
    jobs.queue,
    jobs.kind,
    jobs.args,
    jobs.state,
    jobs.priority,
    jobs.run_at,
    (jobs.attempt - jobs.uncounted) AS attempts_used,
    jobs.max_attempts,
    jobs.attempt AS lease_attempt,
    jobs.node_id,
    jobs.lease_expires_at,
    jobs.created_at,
    jobs.attempted_at,
    jobs.finished_at,
    jobs.duration_ms,
    jsonb_array_length(jobs.errors) AS error_count,
    ((jobs.errors -> '-1'::integer) ->> 'error'::text) AS last_error
   FROM hopper.jobs;


CREATE TABLE hopper.migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);


CREATE TABLE hopper.nodes (
    id uuid NOT NULL,
    name text NOT NULL,
    queues text[] DEFAULT '{}'::text[] NOT NULL,
    concurrency integer DEFAULT 0 NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    heartbeat_at timestamp with time zone DEFAULT now() NOT NULL
);


ALTER TABLE ONLY hopper.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);


ALTER TABLE ONLY hopper.migrations
    ADD CONSTRAINT migrations_pkey PRIMARY KEY (version);


ALTER TABLE ONLY hopper.nodes
    ADD CONSTRAINT nodes_pkey PRIMARY KEY (id);


CREATE INDEX jobs_claim_idx ON hopper.jobs USING btree (queue, priority, run_at, id) WHERE (state = 'available'::hopper.job_state);


CREATE INDEX jobs_running_idx ON hopper.jobs USING btree (lease_expires_at) WHERE (state = 'running'::hopper.job_state);


CREATE INDEX jobs_scheduled_idx ON hopper.jobs USING btree (run_at) WHERE (state = 'scheduled'::hopper.job_state);
