-- Job metadata: a JSON object beside the arguments (docs/job-meta-and-logs.md), for what is
-- about the job rather than its work: the W3C trace context of the span that enqueued it
-- (meta.traceparent, meta.tracestate), a tenant, a user.
--
-- The column: NOT NULL with a constant default, which PostgreSQL 11+ records in the
-- catalog without rewriting the table. The object check is added NOT VALID: every
-- existing row holds the default '{}', so scanning them (under the ACCESS EXCLUSIVE lock
-- the ALTER holds) would prove nothing; new and updated rows are checked. No index: a
-- GIN index (jsonb_path_ops) added 13-30% to the insert time of jobs carrying a trace id
-- each, and helps only searches with rare matches (docs/benchmarks.md, "Job metadata: GIN
-- or not"); containment searches are admin queries that walk the primary key like the
-- other filters of job_search.sql.
ALTER TABLE hopper.jobs ADD COLUMN meta jsonb NOT NULL DEFAULT '{}';
ALTER TABLE hopper.jobs ADD CONSTRAINT jobs_meta_object
    CHECK (jsonb_typeof(meta) = 'object') NOT VALID;

CREATE OR REPLACE VIEW hopper.job_view AS
SELECT id, queue, kind, args, state, priority, run_at,
       attempt - uncounted AS attempts_used, max_attempts, attempt AS lease_attempt,
       node_id, lease_expires_at, created_at, attempted_at, finished_at, duration_ms,
       jsonb_array_length(errors) AS error_count, errors -> -1 ->> 'error' AS last_error,
       group_key, unique_key, meta
FROM hopper.jobs;

-- True when `tp` is a W3C traceparent: lowercase hex fields of 2, 32, 16 and 2 digits, a
-- version other than ff (version 00: exactly 55 characters; later ones may append '-' and
-- more), neither id all zeros. The same rules as hopper_core::meta::validate_traceparent.
CREATE FUNCTION hopper.is_traceparent(tp text) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT tp ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$'
       AND left(tp, 2) <> 'ff'
       AND (left(tp, 2) <> '00' OR length(tp) = 55)
       AND length(tp) <= 256
       AND substr(tp, 4, 32) <> repeat('0', 32)
       AND substr(tp, 37, 16) <> repeat('0', 16)
$$;

-- hopper.enqueue gains `meta` (a JSON object of at most 16 KiB, trace context checked),
-- refused like every other bad argument: SQLSTATE 22023 and a sentence naming it.
DROP FUNCTION hopper.enqueue(text, jsonb, text, integer, timestamptz, integer, interval, text, text);

CREATE FUNCTION hopper.enqueue(
    kind         text,
    args         jsonb DEFAULT '{}',
    queue        text DEFAULT 'default',
    priority     integer DEFAULT 2,
    run_at       timestamptz DEFAULT NULL,
    max_attempts integer DEFAULT 25,
    timeout      interval DEFAULT interval '30 minutes',
    group_key    text DEFAULT NULL,
    unique_key   text DEFAULT NULL,
    meta         jsonb DEFAULT '{}'
) RETURNS uuid
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    new_id     uuid := hopper.uuid_v7();
    due        boolean := run_at IS NULL OR run_at <= now();
    grp        text := group_key;
    held_by    uuid;
    timeout_ms numeric := round(extract(epoch FROM timeout) * 1000);
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
    PERFORM hopper.refuse_if(meta IS NULL OR jsonb_typeof(meta) <> 'object',
        format('meta must be a JSON object, got %s', coalesce(jsonb_typeof(meta), 'NULL')));
    PERFORM hopper.refuse_if(octet_length(meta::text) > 16384,
        format('meta is %s bytes as JSON, over the limit of 16384 bytes', octet_length(meta::text)));
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
$$;
