-- Inserts one job. `job_insert_many` runs this same statement once per job inside one
-- transaction: SQLite has no COPY, and a prepared statement re-run in-process costs no
-- round trip (100,000 jobs take well under a second).
-- :run_at is the job's run_at, or :now when it has none; a job due later is `scheduled`.
INSERT INTO hopper_jobs (id, queue, kind, args, state, priority, run_at, max_attempts,
                         timeout_ms, created_at)
VALUES (
    :id, :queue, :kind, :args,
    CASE WHEN :run_at > :now THEN 'scheduled' ELSE 'available' END,
    :priority, :run_at, :max_attempts, :timeout_ms, :now
)
