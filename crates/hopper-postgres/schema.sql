CREATE SCHEMA hopper;


CREATE TYPE hopper.job_state AS ENUM (
    'scheduled',
    'available',
    'running',
    'completed',
    'failed',
    'cancelled'
);


CREATE FUNCTION hopper.any_unfinished_jobs() RETURNS boolean
    LANGUAGE sql STABLE
    SET max_parallel_workers_per_gather TO '0'
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    AS $$
    SELECT EXISTS (SELECT FROM hopper.jobs WHERE state = 'available')
        OR EXISTS (SELECT FROM hopper.jobs WHERE state = 'running')
        OR EXISTS (SELECT FROM hopper.jobs WHERE state = 'scheduled')
$$;


CREATE FUNCTION hopper.check_name(what text, name text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF name IS NULL OR octet_length(name) NOT BETWEEN 1 AND 128
       OR name ~ '[^A-Za-z0-9_.:-]' THEN
        PERFORM hopper.check_name('hopper.enqueue', what, name);
    END IF;
END
$$;


CREATE FUNCTION hopper.check_name(caller text, what text, name text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
    bad text;
BEGIN
    IF name IS NULL OR octet_length(name) NOT BETWEEN 1 AND 128 THEN
        RAISE EXCEPTION '%: % name must be 1 to 128 characters, got %',
            caller, what, coalesce(octet_length(name)::text, 'NULL') USING ERRCODE = '22023';
    END IF;
    bad := substring(name FROM '[^A-Za-z0-9_.:-]');
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION '%: % name % has the character %; allowed are A-Z a-z 0-9 _ - . :',
            caller, what, hopper.quoted_for_message(name, '"'),
            hopper.quoted_for_message(bad, '''') USING ERRCODE = '22023';
    END IF;
END
$$;


CREATE FUNCTION hopper.enqueue(kind text, args jsonb DEFAULT '{}'::jsonb, queue text DEFAULT 'default'::text, priority integer DEFAULT 2, run_at timestamp with time zone DEFAULT NULL::timestamp with time zone, max_attempts integer DEFAULT 25, timeout interval DEFAULT '00:30:00'::interval, group_key text DEFAULT NULL::text, unique_key text DEFAULT NULL::text, meta jsonb DEFAULT '{}'::jsonb) RETURNS uuid
    LANGUAGE plpgsql
    AS $_$
DECLARE
    new_id     uuid := hopper.uuid_v7();
    due        boolean := run_at IS NULL OR run_at <= now();
    grp        text := group_key;
    held_by    uuid;
    timeout_ms numeric := round(extract(epoch FROM timeout) * 1000);
    args_why   text := hopper.unreadable_json(args);
    meta_why   text := hopper.unreadable_json(meta);
BEGIN
    PERFORM hopper.check_name('kind', kind);
    PERFORM hopper.check_name('queue', queue);
    IF grp IS NOT NULL THEN
        PERFORM hopper.check_name('group', grp);
    END IF;
    PERFORM hopper.refuse_if(args IS NULL OR jsonb_typeof(args) NOT IN ('object', 'array'),
        format('args must be a JSON object or array, got %s', coalesce(jsonb_typeof(args), 'NULL')));
    PERFORM hopper.refuse_if(octet_length(args::text) > 1048576,
        format('args are %s bytes as JSON, over the limit of 1048576 bytes', octet_length(args::text)));
    PERFORM hopper.refuse_if(args_why IS NOT NULL, format('args cannot be read by hopper: %s', args_why));
    PERFORM hopper.refuse_if(meta IS NULL OR jsonb_typeof(meta) <> 'object',
        format('meta must be a JSON object, got %s', coalesce(jsonb_typeof(meta), 'NULL')));
    PERFORM hopper.refuse_if(octet_length(meta::text) > 16384,
        format('meta is %s bytes as JSON, over the limit of 16384 bytes', octet_length(meta::text)));
    PERFORM hopper.refuse_if(meta_why IS NOT NULL, format('meta cannot be read by hopper: %s', meta_why));
    PERFORM hopper.refuse_if(meta ? 'traceparent' AND (jsonb_typeof(meta -> 'traceparent') <> 'string'
            OR NOT hopper.is_traceparent(meta ->> 'traceparent')),
        format('meta.traceparent %s is not a W3C traceparent (version-traceid-parentid-flags, e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01)',
               left(meta ->> 'traceparent', 64)));
    PERFORM hopper.refuse_if(meta ? 'tracestate' AND (jsonb_typeof(meta -> 'tracestate') <> 'string'
            OR octet_length(meta ->> 'tracestate') > 512 OR (meta ->> 'tracestate') !~ '^[\x20-\x7e]*$'),
        'meta.tracestate must be a string of at most 512 bytes of printable ASCII');
    PERFORM hopper.refuse_if(priority IS NULL OR priority NOT BETWEEN -32768 AND 32767,
        format('priority must be from -32768 to 32767, got %s', coalesce(priority::text, 'NULL')));
    PERFORM hopper.refuse_if(run_at IS NOT NULL AND (NOT isfinite(run_at)
            OR run_at < timestamptz '1970-01-01 00:00:00+00'
            OR run_at >= timestamptz '10000-01-01 00:00:00+00'),
        format('run_at %s is out of range: instants must lie between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z', run_at));
    PERFORM hopper.refuse_if(max_attempts IS NULL OR max_attempts < 1,
        format('max_attempts must be at least 1, got %s', coalesce(max_attempts::text, 'NULL')));
    PERFORM hopper.refuse_if(timeout_ms IS NULL OR timeout_ms NOT BETWEEN 1 AND 2147483647,
        format('timeout must be between 1 ms and 2147483647 ms, got %s', coalesce(timeout::text, 'NULL')));
    IF unique_key IS NOT NULL THEN
        PERFORM hopper.refuse_if(octet_length(unique_key) NOT BETWEEN 1 AND 255,
            format('unique key must be 1 to 255 bytes, got %s', octet_length(unique_key)));
        PERFORM hopper.refuse_if(unique_key ~ '[\u0001-\u001f\u007f-\u009f]',
            'unique key must not contain control characters');
    END IF;
    IF grp IS NOT NULL THEN
        PERFORM hopper.mark_grouped(ARRAY[queue]);
    ELSIF EXISTS (SELECT 1 FROM hopper.queues q WHERE q.name = enqueue.queue AND q.grouped) THEN
        grp := '';
    END IF;
    LOOP
        INSERT INTO hopper.jobs (id, queue, kind, args, state, priority, run_at, max_attempts,
                                 timeout_ms, group_key, unique_key, meta)
        VALUES (new_id, queue, kind, args,
                CASE WHEN due THEN 'available' ELSE 'scheduled' END::hopper.job_state,
                priority::smallint, coalesce(run_at, now()), max_attempts,
                timeout_ms::integer, grp, unique_key, meta)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            IF due THEN
                PERFORM pg_notify('hopper_wake', 'a:' || queue);
            END IF;
            RETURN new_id;
        END IF;
        SELECT j.id INTO held_by FROM hopper.jobs j
        WHERE j.unique_key = enqueue.unique_key
          AND j.state IN ('scheduled', 'available', 'running');
        IF FOUND THEN
            RETURN held_by;
        END IF;
        -- The holder finished between the two statements: try again.
    END LOOP;
END
$_$;


CREATE FUNCTION hopper.error_history_pushed(errors jsonb, entry jsonb, keep integer) RETURNS jsonb
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $_$
    SELECT CASE
        WHEN jsonb_typeof(errors) IS DISTINCT FROM 'array' THEN '[]'::jsonb
        WHEN jsonb_array_length(errors) >= keep
        THEN jsonb_path_query_array(
            errors, '$[last - $keep + 2 to last]', jsonb_build_object('keep', keep))
        ELSE errors
    END || jsonb_build_array(entry)
$_$;


CREATE FUNCTION hopper.is_traceparent(tp text) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $_$
    SELECT tp ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$'
       AND left(tp, 2) <> 'ff'
       AND (left(tp, 2) <> '00' OR length(tp) = 55)
       AND length(tp) <= 256
       AND substr(tp, 4, 32) <> repeat('0', 32)
       AND substr(tp, 37, 16) <> repeat('0', 16)
$_$;


CREATE FUNCTION hopper.mark_grouped(queues text[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    q text;
BEGIN
    PERFORM hopper.check_name('hopper.mark_grouped', 'queue', u.name)
    FROM unnest(queues) AS u(name);
    FOR q IN
        SELECT u.name FROM unnest(queues) AS u(name)
        WHERE NOT EXISTS (SELECT 1 FROM hopper.queues s WHERE s.name = u.name AND s.grouped)
    LOOP
        INSERT INTO hopper.queues (name, grouped) VALUES (q, true)
        ON CONFLICT (name) DO UPDATE SET grouped = true, updated_at = now();
        UPDATE hopper.jobs SET group_key = ''
        WHERE queue = q AND group_key IS NULL;
        PERFORM pg_notify('hopper_wake', 'q:' || q);
    END LOOP;
END
$$;


CREATE FUNCTION hopper.pause_queue(queue text) RETURNS void
    LANGUAGE sql
    AS $$
    SELECT hopper.check_name('hopper.pause_queue', 'queue', queue);
    INSERT INTO hopper.queues (name, paused) VALUES (queue, true)
    ON CONFLICT (name) DO UPDATE SET paused = true, updated_at = now();
    SELECT pg_notify('hopper_wake', 'q:' || queue);
$$;


CREATE FUNCTION hopper.quoted_for_message(text text, quote text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
    shown text := '';
    c     text;
BEGIN
    FOREACH c IN ARRAY regexp_split_to_array(left(text, 64), '')
    LOOP
        shown := shown || CASE
            WHEN c IN (quote, '\') THEN '\' || c
            WHEN ascii(c) BETWEEN 32 AND 126 THEN c
            ELSE '\u{' || to_hex(ascii(c)) || '}'
        END;
    END LOOP;
    IF length(text) > 64 THEN
        shown := shown || format('…(%s bytes)', octet_length(text));
    END IF;
    RETURN quote || shown || quote;
END
$$;


CREATE FUNCTION hopper.refuse_if(bad boolean, message text) RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    AS $$
BEGIN
    IF bad THEN
        RAISE EXCEPTION 'hopper.enqueue: %', message USING ERRCODE = '22023';
    END IF;
END
$$;


CREATE FUNCTION hopper.resume_queue(queue text) RETURNS void
    LANGUAGE sql
    AS $$
    SELECT hopper.check_name('hopper.resume_queue', 'queue', queue);
    UPDATE hopper.queues SET paused = false, updated_at = now() WHERE name = queue;
    SELECT pg_notify('hopper_wake', 'q:' || queue);
$$;


CREATE FUNCTION hopper.unfinished_jobs() RETURNS bigint
    LANGUAGE sql STABLE
    SET max_parallel_workers_per_gather TO '0'
    SET enable_seqscan TO 'off'
    SET enable_bitmapscan TO 'off'
    AS $$
    SELECT (SELECT count(*) FROM hopper.jobs WHERE state = 'available')
         + (SELECT count(*) FROM hopper.jobs WHERE state = 'scheduled')
         + (SELECT count(*) FROM hopper.jobs WHERE state = 'running')
$$;


CREATE FUNCTION hopper.unreadable_json(value jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE
    AS $_$
    SELECT CASE
        WHEN jsonb_path_exists(value, 'strict $.**{128 to last}')
        THEN 'nested deeper than 127 levels'
        WHEN jsonb_path_exists(value, 'strict $.** ? (@.type() == "number" && '
                                      '(@ >= 1.797693134862315807937289714053e308 || '
                                      '@ <= -1.797693134862315807937289714053e308))')
        THEN 'a number beyond a double''s range (about 1.8e308)'
    END
$_$;


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



CREATE TABLE hopper.cron_jobs (
    name text NOT NULL,
    schedule text NOT NULL,
    timezone text DEFAULT 'UTC'::text NOT NULL,
    queue text NOT NULL,
    kind text NOT NULL,
    args jsonb DEFAULT '{}'::jsonb NOT NULL,
    priority smallint DEFAULT 2 NOT NULL,
    max_attempts integer DEFAULT 25 NOT NULL,
    timeout_ms integer DEFAULT 1800000 NOT NULL,
    catch_up boolean DEFAULT false NOT NULL,
    next_run_at timestamp with time zone NOT NULL,
    last_run_at timestamp with time zone,
    last_job_id uuid,
    registered_at timestamp with time zone DEFAULT now() NOT NULL,
    seen_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT cron_jobs_name_check CHECK ((((length(name) >= 1) AND (length(name) <= 128)) AND (name !~ '[^A-Za-z0-9_.:-]'::text)))
);


CREATE TABLE hopper.held_leases (
    job_id uuid NOT NULL,
    attempt integer NOT NULL,
    expires_at timestamp with time zone NOT NULL
);


CREATE TABLE hopper.job_logs (
    job_id uuid NOT NULL,
    attempt integer NOT NULL,
    lines jsonb DEFAULT '[]'::jsonb NOT NULL,
    bytes integer DEFAULT 0 NOT NULL,
    dropped bigint DEFAULT 0 NOT NULL,
    CONSTRAINT job_logs_lines_check CHECK ((jsonb_typeof(lines) = 'array'::text))
);


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
    group_key text,
    unique_key text,
    unique_window timestamp with time zone,
    meta jsonb DEFAULT '{}'::jsonb NOT NULL,
    unique_until timestamp with time zone,
    CONSTRAINT jobs_args_check CHECK ((jsonb_typeof(args) = ANY (ARRAY['object'::text, 'array'::text]))),
    CONSTRAINT jobs_max_attempts_check CHECK ((max_attempts > 0)),
    CONSTRAINT jobs_timeout_ms_check CHECK ((timeout_ms > 0)),
    CONSTRAINT jobs_unique_key_check CHECK (((length(unique_key) >= 1) AND (length(unique_key) <= 255)))
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
    ((jobs.errors -> '-1'::integer) ->> 'error'::text) AS last_error,
    jobs.group_key,
    jobs.unique_key,
    jobs.meta
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
    heartbeat_at timestamp with time zone DEFAULT now() NOT NULL,
    liveness_key bigint,
    liveness_epoch timestamp with time zone
);


CREATE TABLE hopper.queues (
    name text NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    grouped boolean DEFAULT false NOT NULL,
    max_running integer,
    max_running_per_group integer,
    rate_limit integer,
    rate_interval_ms integer,
    rate_burst integer,
    rate_tokens double precision DEFAULT 0 NOT NULL,
    rate_refilled_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT queues_check CHECK (((rate_limit IS NULL) = (rate_interval_ms IS NULL))),
    CONSTRAINT queues_max_running_check CHECK ((max_running > 0)),
    CONSTRAINT queues_max_running_per_group_check CHECK ((max_running_per_group > 0)),
    CONSTRAINT queues_name_check CHECK ((((length(name) >= 1) AND (length(name) <= 128)) AND (name !~ '[^A-Za-z0-9_.:-]'::text))),
    CONSTRAINT queues_rate_burst_check CHECK ((rate_burst > 0)),
    CONSTRAINT queues_rate_interval_ms_check CHECK ((rate_interval_ms > 0)),
    CONSTRAINT queues_rate_limit_check CHECK ((rate_limit > 0))
);


CREATE VIEW hopper.queue_view AS
 SELECT COALESCE(s.name, c.queue) AS name,
    COALESCE(s.paused, false) AS paused,
    COALESCE(s.grouped, false) AS grouped,
    s.max_running,
    s.max_running_per_group,
    s.rate_limit,
    s.rate_interval_ms,
    s.rate_burst,
    COALESCE(c.available, (0)::bigint) AS available,
    COALESCE(c.scheduled, (0)::bigint) AS scheduled,
    COALESCE(c.running, (0)::bigint) AS running
   FROM (hopper.queues s
     FULL JOIN ( SELECT jobs.queue,
            count(*) FILTER (WHERE (jobs.state = 'available'::hopper.job_state)) AS available,
            count(*) FILTER (WHERE (jobs.state = 'scheduled'::hopper.job_state)) AS scheduled,
            count(*) FILTER (WHERE (jobs.state = 'running'::hopper.job_state)) AS running
           FROM hopper.jobs
          WHERE (jobs.state = ANY (ARRAY['scheduled'::hopper.job_state, 'available'::hopper.job_state, 'running'::hopper.job_state]))
          GROUP BY jobs.queue) c ON ((c.queue = s.name)));


ALTER TABLE ONLY hopper.cron_jobs
    ADD CONSTRAINT cron_jobs_pkey PRIMARY KEY (name);


ALTER TABLE ONLY hopper.held_leases
    ADD CONSTRAINT held_leases_pkey PRIMARY KEY (job_id);


ALTER TABLE ONLY hopper.job_logs
    ADD CONSTRAINT job_logs_pkey PRIMARY KEY (job_id, attempt);


ALTER TABLE hopper.jobs
    ADD CONSTRAINT jobs_meta_object CHECK ((jsonb_typeof(meta) = 'object'::text)) NOT VALID;


ALTER TABLE ONLY hopper.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);


ALTER TABLE ONLY hopper.migrations
    ADD CONSTRAINT migrations_pkey PRIMARY KEY (version);


ALTER TABLE ONLY hopper.nodes
    ADD CONSTRAINT nodes_pkey PRIMARY KEY (id);


ALTER TABLE ONLY hopper.queues
    ADD CONSTRAINT queues_pkey PRIMARY KEY (name);


CREATE INDEX jobs_claim_idx ON hopper.jobs USING btree (hashtextextended(queue, (0)::bigint), priority, run_at, id) WHERE (state = 'available'::hopper.job_state);


CREATE INDEX jobs_group_claim_idx ON hopper.jobs USING btree (queue, group_key, priority, run_at, id) WHERE ((state = 'available'::hopper.job_state) AND (group_key IS NOT NULL));


CREATE INDEX jobs_running_idx ON hopper.jobs USING btree (lease_expires_at) WHERE (state = 'running'::hopper.job_state);


CREATE INDEX jobs_scheduled_idx ON hopper.jobs USING btree (run_at) WHERE (state = 'scheduled'::hopper.job_state);


CREATE UNIQUE INDEX jobs_unique_active_idx ON hopper.jobs USING btree (unique_key) WHERE ((unique_key IS NOT NULL) AND (state = ANY (ARRAY['scheduled'::hopper.job_state, 'available'::hopper.job_state, 'running'::hopper.job_state])));


CREATE UNIQUE INDEX jobs_unique_window_idx ON hopper.jobs USING btree (unique_key, unique_window) WHERE (unique_window IS NOT NULL);


ALTER TABLE ONLY hopper.job_logs
    ADD CONSTRAINT job_logs_job_id_fkey FOREIGN KEY (job_id) REFERENCES hopper.jobs(id) ON DELETE CASCADE;
