-- hopper's schema, version 2: scheduling and control. Group keys (tenant fairness), unique
-- keys, per-queue settings (pause, global concurrency and rate limits), periodic jobs.
-- See docs/scheduling.md for what each piece is for.

-- The tenant a job belongs to. Within a queue whose jobs carry groups, groups take turns
-- (round-robin) so one group's backlog cannot starve the others. NULL: no group. The
-- empty string is the "no group" group of a queue that has groups (see queues.grouped).
ALTER TABLE hopper.jobs
    ADD COLUMN group_key text CHECK (group_key ~ '^[A-Za-z0-9_.:-]{0,128}$');

-- At most one job per unique key is scheduled, available or running at a time
-- (jobs_unique_active_idx). With a window, also at most one per key and window
-- (jobs_unique_window_idx), finished or not: unique_window is the start of the window
-- the job was inserted in (epoch-aligned buckets of the window's length).
ALTER TABLE hopper.jobs
    ADD COLUMN unique_key text CHECK (length(unique_key) BETWEEN 1 AND 255),
    ADD COLUMN unique_window timestamptz;

-- The fair claim's index: ready jobs with a group, by group, then in claim order. Jobs
-- without a group are not in it, so queues that use no groups pay nothing for it (the
-- predicate is false at insert, and claimed rows never match it). The fair claim hops
-- from group to group over it (a loose index scan) and reads each group's first entries.
CREATE INDEX jobs_group_claim_idx ON hopper.jobs (queue, group_key, priority, run_at, id)
    WHERE state = 'available' AND group_key IS NOT NULL;

-- Uniqueness, enforced by the database so concurrent inserters cannot both win
-- (INSERT … ON CONFLICT DO NOTHING waits for the other inserter's transaction).
CREATE UNIQUE INDEX jobs_unique_active_idx ON hopper.jobs (unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('scheduled', 'available', 'running');
CREATE UNIQUE INDEX jobs_unique_window_idx ON hopper.jobs (unique_key, unique_window)
    WHERE unique_window IS NOT NULL;

-- Per-queue settings. A queue without a row, or whose row sets nothing, is claimed by the
-- plain statement (job_claim.sql); the others by the statement their settings need.
-- Workers cache these rows (refreshed by NOTIFY 'q:<queue>' and every half second).
CREATE TABLE hopper.queues (
    name                  text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    -- No claims while paused; inserts are still accepted.
    paused                boolean NOT NULL DEFAULT false,
    -- Set (once) when a job with a group is inserted: claims rotate between groups.
    grouped               boolean NOT NULL DEFAULT false,
    -- Most jobs running at once, across every node.
    max_running           integer CHECK (max_running > 0),
    -- Most jobs of one group running at once, across every node.
    max_running_per_group integer CHECK (max_running_per_group > 0),
    -- Most jobs started per rate_interval_ms (a token bucket, see below).
    rate_limit            integer CHECK (rate_limit > 0),
    rate_interval_ms      integer CHECK (rate_interval_ms > 0),
    -- Most tokens the bucket holds: how many jobs may start at once after a quiet spell.
    rate_burst            integer CHECK (rate_burst > 0),
    -- The bucket: tokens left at rate_refilled_at. Only claims holding this row's lock
    -- read or write them.
    rate_tokens           double precision NOT NULL DEFAULT 0,
    rate_refilled_at      timestamptz,
    updated_at            timestamptz NOT NULL DEFAULT now(),
    CHECK ((rate_limit IS NULL) = (rate_interval_ms IS NULL))
);

-- Periodic jobs, registered by runtimes. A runtime enqueues the ticks of the entries it
-- registered itself; advancing next_run_at is a compare-and-set, and each tick's job has
-- the unique key 'cron:<name>:<tick>' with the tick as its window, so a tick is enqueued once
-- however many nodes run.
CREATE TABLE hopper.cron_jobs (
    name          text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    -- Five fields (minute hour day-of-month month day-of-week), or six with seconds.
    schedule      text NOT NULL,
    -- An IANA time zone name (Europe/Paris); ticks follow its daylight saving changes.
    timezone      text NOT NULL DEFAULT 'UTC',
    queue         text NOT NULL,
    kind          text NOT NULL,
    args          jsonb NOT NULL DEFAULT '{}',
    priority      smallint NOT NULL DEFAULT 2,
    max_attempts  integer NOT NULL DEFAULT 25,
    timeout_ms    integer NOT NULL DEFAULT 1800000,
    -- Enqueue every missed tick after downtime (true) or only the latest one (false).
    catch_up      boolean NOT NULL DEFAULT false,
    next_run_at   timestamptz NOT NULL,
    last_run_at   timestamptz,
    last_job_id   uuid,
    registered_at timestamptz NOT NULL DEFAULT now(),
    -- Refreshed by every runtime that registers the entry.
    seen_at       timestamptz NOT NULL DEFAULT now()
);

-- Pause or resume a queue from SQL; workers stop claiming within a second (at once when
-- they hear the notification).
CREATE FUNCTION hopper.pause_queue(queue text) RETURNS void
LANGUAGE sql VOLATILE AS $$
    INSERT INTO hopper.queues (name, paused) VALUES (queue, true)
    ON CONFLICT (name) DO UPDATE SET paused = true, updated_at = now();
    SELECT pg_notify('hopper_wake', 'q:' || queue);
$$;

CREATE FUNCTION hopper.resume_queue(queue text) RETURNS void
LANGUAGE sql VOLATILE AS $$
    UPDATE hopper.queues SET paused = false, updated_at = now() WHERE name = queue;
    SELECT pg_notify('hopper_wake', 'q:' || queue);
$$;

-- The public SQL API, version 2: enqueue() also takes a group and a unique key (named
-- arguments: hopper.enqueue('kind', group_key => 'tenant-1')). A job whose unique key is
-- taken is not inserted and the holder's id is returned (the 'ignore' policy; the Rust
-- client offers 'reject' and 'replace' too). Calls written for version 1 work unchanged.
DROP FUNCTION hopper.enqueue(text, jsonb, text, smallint, timestamptz, integer, interval);
CREATE FUNCTION hopper.enqueue(
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

-- Marks queues as grouped (once): from then on their claims rotate between groups. Every
-- job of the queue without a group joins the "no group" group '' so the fair claim, which
-- reads jobs_group_claim_idx, sees it: waiting ones, and also running and finished ones,
-- which may come back (a retry, a manual retry). Workers hear of it by NOTIFY 'q:<queue>'.
CREATE FUNCTION hopper.mark_grouped(queues text[]) RETURNS void
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    q text;
BEGIN
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

-- What users query with psql: every queue that has jobs or settings, with its counts.
CREATE VIEW hopper.queue_view AS
SELECT coalesce(s.name, c.queue) AS name,
       coalesce(s.paused, false) AS paused,
       coalesce(s.grouped, false) AS grouped,
       s.max_running, s.max_running_per_group,
       s.rate_limit, s.rate_interval_ms, s.rate_burst,
       coalesce(c.available, 0) AS available,
       coalesce(c.scheduled, 0) AS scheduled,
       coalesce(c.running, 0) AS running
FROM hopper.queues AS s
FULL JOIN (
    SELECT queue,
           count(*) FILTER (WHERE state = 'available') AS available,
           count(*) FILTER (WHERE state = 'scheduled') AS scheduled,
           count(*) FILTER (WHERE state = 'running') AS running
    FROM hopper.jobs
    WHERE state IN ('scheduled', 'available', 'running')
    GROUP BY queue
) AS c ON c.queue = s.name;

CREATE OR REPLACE VIEW hopper.job_view AS
SELECT id, queue, kind, args, state, priority, run_at,
       attempt - uncounted AS attempts_used, max_attempts, attempt AS lease_attempt,
       node_id, lease_expires_at, created_at, attempted_at, finished_at, duration_ms,
       jsonb_array_length(errors) AS error_count, errors -> -1 ->> 'error' AS last_error,
       group_key, unique_key
FROM hopper.jobs;
