-- Names checked at the door: the job table's three name checks (queue, kind, group_key)
-- move out of the table, into every path that writes a job.
--
-- A CHECK constraint runs for every row written, and PostgreSQL also runs it for every row
-- UPDATEd, whatever columns changed: each job paid the three regular expressions once at
-- insert, again at its claim and again at its outcome. Measured on 2026-11-24 (2-core
-- machine, PostgreSQL 15): the server-side COPY of 1,000 job rows in the exact shape of
-- hopper's bulk insert (pgbench, table truncated before each 3 s run, 4 alternated runs
-- each): 157 / 164 / 173 / 179 statements/s with every check, 172 / 185 / 193 / 205
-- without the three name checks (+10% median), 174 / 182 / 182 / 190 without any check.
-- In a profile of W1 the constraint checks were 12% of the COPY's time, the regular
-- expressions most of it. The integer and JSON checks stay: they cost nothing measurable.
--
-- Every writer still refuses a bad name before it reaches the table:
--   - the Rust client (`NewJob::validate`), and so the ZeroMQ server, the HTTP API, the
--     CLI and periodic jobs, which all write through it;
--   - `hopper.enqueue`, below, with the same rule and a clear error (SQLSTATE 22023);
--   - hopper.queues and hopper.cron_jobs keep their own checks (few rows, rarely written).
-- Rows INSERTed into hopper.jobs by hand, bypassing hopper.enqueue, are not checked; the
-- table is not an API (docs/ARCHITECTURE.md, "Names").

ALTER TABLE hopper.jobs
    DROP CONSTRAINT jobs_queue_check,
    DROP CONSTRAINT jobs_kind_check,
    DROP CONSTRAINT jobs_group_key_check;

-- Raises 22023 unless `name` is 1 to 128 characters from A-Z a-z 0-9 _ . : - (the rule of
-- hopper_core::validate_name). `what` names the argument in the message.
CREATE FUNCTION hopper.check_name(what text, name text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF name IS NULL OR length(name) NOT BETWEEN 1 AND 128 OR name ~ '[^A-Za-z0-9_.:-]' THEN
        RAISE EXCEPTION 'hopper.enqueue: invalid % name %: use 1 to 128 characters from A-Z a-z 0-9 _ . : -',
            what, coalesce(quote_literal(left(name, 140)), 'NULL') USING ERRCODE = '22023';
    END IF;
END
$$;

-- hopper.enqueue as in version 2, with the names checked first.
CREATE OR REPLACE FUNCTION hopper.enqueue(
    kind         text,
    args         jsonb DEFAULT '{}',
    queue        text DEFAULT 'default',
    priority     smallint DEFAULT 2,
    run_at       timestamptz DEFAULT NULL,
    max_attempts integer DEFAULT 25,
    timeout      interval DEFAULT interval '30 minutes',
    group_key    text DEFAULT NULL,
    unique_key   text DEFAULT NULL
) RETURNS uuid
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    new_id   uuid := hopper.uuid_v7();
    due      boolean := run_at IS NULL OR run_at <= now();
    grp      text := group_key;
    held_by  uuid;
BEGIN
    PERFORM hopper.check_name('kind', kind);
    PERFORM hopper.check_name('queue', queue);
    IF grp IS NOT NULL THEN
        PERFORM hopper.check_name('group', grp);
    END IF;
    IF octet_length(args::text) > 1048576 THEN
        RAISE EXCEPTION 'hopper.enqueue: args are % bytes as JSON, over the limit of 1048576 bytes',
            octet_length(args::text) USING ERRCODE = '22023';
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
                priority, coalesce(run_at, now()), max_attempts,
                (extract(epoch FROM timeout) * 1000)::integer, grp, unique_key)
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
