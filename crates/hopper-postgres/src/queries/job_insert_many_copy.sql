COPY hopper.jobs (id, queue, kind, args, state, priority, run_at, max_attempts, timeout_ms)
FROM STDIN (FORMAT binary)
