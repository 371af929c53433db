-- hopper.enqueue refuses what no other way in accepts, with a clear message each.
--
-- Every value is checked before the INSERT, by the rules of hopper_core::limits and
-- NewJob::validate, so that a bad call raises SQLSTATE 22023 with a sentence naming the
-- argument, instead of a constraint violation that prints the whole row, or a row that
-- hopper cannot read back (`run_at => 'infinity'` stopped every promoter):
--   - run_at is finite, between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z;
--   - priority is an integer (no `::smallint` cast needed) from -32768 to 32767;
--   - max_attempts is at least 1; timeout between 1 ms and 2147483647 ms;
--   - args is a JSON object or array of at most 1 MiB;
--   - unique_key is 1 to 255 bytes without control characters.
-- The version with `priority smallint` is dropped rather than overloaded: both would
-- match `priority => 1` and PostgreSQL would refuse the call as ambiguous. Calls that cast
-- to smallint keep working (smallint converts to integer implicitly).

DROP FUNCTION hopper.enqueue(text, jsonb, text, smallint, timestamptz, integer, interval, text, text);

-- Raises 22023 with `message` (prefixed with the function's name) when `bad` is true.
CREATE FUNCTION hopper.refuse_if(bad boolean, message text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF bad THEN
        RAISE EXCEPTION 'hopper.enqueue: %', message USING ERRCODE = '22023';
    END IF;
END
$$;

CREATE FUNCTION hopper.enqueue(
    kind         text,
    args         jsonb DEFAULT '{}',
    queue        text DEFAULT 'default',
    priority     integer DEFAULT 2,
    run_at       timestamptz DEFAULT NULL,
    max_attempts integer DEFAULT 25,
    timeout      interval DEFAULT interval '30 minutes',
    group_key    text DEFAULT NULL,
    unique_key   text DEFAULT NULL
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
                                 timeout_ms, group_key, unique_key)
        VALUES (new_id, queue, kind, args,
                CASE WHEN due THEN 'available' ELSE 'scheduled' END::hopper.job_state,
                priority::smallint, coalesce(run_at, now()), max_attempts,
                timeout_ms::integer, grp, unique_key)
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
