-- Inserts one job; `job_insert_many` and `job_upsert_many` run this same statement once
-- per job inside one transaction: SQLite has no COPY, and a prepared statement re-run
-- in-process costs no round trip (100,000 jobs take well under a second in a release
-- build).
-- :run_at is the job's run_at, or :now when it has none; a job due later is `scheduled`.
-- :group_key is the job's group ('' for a job without one in a grouped queue).
-- :unique_window is the start of the job's unique window (µs), if it has one, and
-- :unique_until its end (pruning keeps the job until then).
-- ON CONFLICT DO NOTHING: a taken unique key (or id) inserts nothing (no row changed);
-- the caller then looks for the holder and applies the job's unique policy. CHECK
-- violations still fail the statement.
INSERT INTO hopper_jobs (id, queue, kind, args, state, priority, run_at, max_attempts,
                         timeout_ms, created_at, group_key, unique_key, unique_window,
                         meta, unique_until)
VALUES (
    :id, :queue, :kind, :args,
    CASE WHEN :run_at > :now THEN 'scheduled' ELSE 'available' END,
    :priority, :run_at, :max_attempts, :timeout_ms, :now,
    :group_key, :unique_key, :unique_window, :meta, :unique_until
)
ON CONFLICT DO NOTHING
