-- Every public SQL function that takes a name checks it before anything else, by the rule
-- and in the words of hopper_core::job::validate_name, and refuses a bad one with SQLSTATE
-- 22023 (invalid_parameter_value) and a sentence that names the function and the argument.
--
-- Until now only hopper.enqueue did: hopper.pause_queue('') answered the raw violation of
-- queues_name_check (SQLSTATE 23514, the failing row printed in its DETAIL),
-- hopper.resume_queue('') and hopper.resume_queue(NULL) changed nothing and said nothing,
-- and hopper.mark_grouped(ARRAY['']) failed like pause_queue. The messages are those of
-- the Rust client, so a name is refused in the same words whichever way it comes in:
--   hopper.pause_queue: queue name must be 1 to 128 characters, got 0
--   hopper.enqueue: kind name "a b" has the character ' '; allowed are A-Z a-z 0-9 _ - . :
-- A hostile name is shown safely: at most 64 characters of it, in double quotes, with `"`
-- and `\` escaped and every character outside printable ASCII written \u{hex} (a control
-- character, a terminal escape or a right-to-left override never reaches a log or a
-- terminal as itself), ending in …(N bytes) when cut.

-- `text` as an error message shows it: between two `quote`s, at most 64 characters of it
-- (then …(N bytes) when cut, as hopper_core::log_limit::capped does), the quote and `\`
-- escaped with `\`, and every character outside printable ASCII written \u{hex}.
CREATE FUNCTION hopper.quoted_for_message(text text, quote text) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
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

-- Raises 22023 unless `name` is 1 to 128 bytes from A-Z a-z 0-9 _ . : - (the rule of
-- hopper_core::validate_name). `caller` (the function called) starts the message, `what`
-- names the argument.
CREATE FUNCTION hopper.check_name(caller text, what text, name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
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

-- The check of hopper.enqueue (migration 0004), now in the words above. A good name costs
-- what it did: the test of 0004 first, the message only for a bad one (a SQL function
-- around the three-argument check cost each enqueue 5 µs more for two names, in pgbench).
CREATE OR REPLACE FUNCTION hopper.check_name(what text, name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF name IS NULL OR octet_length(name) NOT BETWEEN 1 AND 128
       OR name ~ '[^A-Za-z0-9_.:-]' THEN
        PERFORM hopper.check_name('hopper.enqueue', what, name);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION hopper.pause_queue(queue text) RETURNS void
LANGUAGE sql VOLATILE AS $$
    SELECT hopper.check_name('hopper.pause_queue', 'queue', queue);
    INSERT INTO hopper.queues (name, paused) VALUES (queue, true)
    ON CONFLICT (name) DO UPDATE SET paused = true, updated_at = now();
    SELECT pg_notify('hopper_wake', 'q:' || queue);
$$;

CREATE OR REPLACE FUNCTION hopper.resume_queue(queue text) RETURNS void
LANGUAGE sql VOLATILE AS $$
    SELECT hopper.check_name('hopper.resume_queue', 'queue', queue);
    UPDATE hopper.queues SET paused = false, updated_at = now() WHERE name = queue;
    SELECT pg_notify('hopper_wake', 'q:' || queue);
$$;

-- hopper.mark_grouped as in migration 0002, with every name checked before any is marked.
CREATE OR REPLACE FUNCTION hopper.mark_grouped(queues text[]) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
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
