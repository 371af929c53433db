-- The chaos run's own bookkeeping, beside hopper's schema in the run's database.
CREATE SCHEMA chaos;

-- Every job the run enqueued, written in the transaction that inserts the job, so a batch
-- whose commit was cut off by a restart is known to be in or out.
CREATE TABLE chaos.expected (
    job_id uuid PRIMARY KEY
);

-- Every run of a handler: written by the handler when it starts, on its own connection and
-- in its own transaction (not in the completion's), so runs that never completed (killed,
-- lease lost) are counted too.
CREATE TABLE chaos.executions (
    job_id  uuid        NOT NULL,
    attempt integer     NOT NULL,
    worker  text        NOT NULL,
    pid     integer     NOT NULL,
    at      timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Every write that made a job completed, as the queue did it: a trigger on hopper.jobs in
-- the completing statement's transaction. Two rows for one job are a double completion.
CREATE TABLE chaos.completions (
    job_id  uuid        NOT NULL,
    attempt integer     NOT NULL,
    at      timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE FUNCTION chaos.record_completion() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos.completions (job_id, attempt) VALUES (NEW.id, NEW.attempt);
    RETURN NULL;
END
$$;

CREATE TRIGGER chaos_completion
    AFTER UPDATE OF state ON hopper.jobs
    FOR EACH ROW
    WHEN (NEW.state = 'completed')
    EXECUTE FUNCTION chaos.record_completion();
