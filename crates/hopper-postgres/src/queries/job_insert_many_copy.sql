COPY hopper.jobs (id, queue, kind, args, state, priority, run_at, max_attempts, timeout_ms, meta)
FROM STDIN (FORMAT binary)
