-- hopper.enqueue refuses arguments and metadata that jsonb holds but hopper cannot read,
-- which were taken, then failed by the first claim or read that met them (the repair keeps
-- their text under `unreadable_args` / `unreadable_meta`): a number beyond a double's range
-- (serde_json reads numbers as 64-bit integers or doubles, and refuses what rounds to an
-- infinity) and nesting deeper than 127 levels (serde_json's limit is 128 containers).
-- Integers beyond 64 bits, which the other surfaces refuse, cannot be told apart here from
-- a whole double (jsonb keeps a number's value, not its writing): they pass, and reach a
-- worker as the nearest double (hopper_core::json_numbers).

-- Why hopper cannot read `value`, or NULL when it can. `$.**{128 to last}` finds an item
-- inside 128 containers; the bound is the midpoint between the largest double and the next
-- power of two, from which a number rounds to an infinity.
CREATE FUNCTION hopper.unreadable_json(value jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN jsonb_path_exists(value, 'strict $.**{128 to last}')
        THEN 'nested deeper than 127 levels'
        WHEN jsonb_path_exists(value, 'strict $.** ? (@.type() == "number" && '
                                      '(@ >= 1.797693134862315807937289714053e308 || '
                                      '@ <= -1.797693134862315807937289714053e308))')
        THEN 'a number beyond a double''s range (about 1.8e308)'
    END
$$;

-- hopper.enqueue as in migration 0009, with the two refusals above.
CREATE OR REPLACE FUNCTION hopper.enqueue(
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
$$;
