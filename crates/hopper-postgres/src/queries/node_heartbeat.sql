INSERT INTO hopper.nodes (id, name, queues, concurrency, started_at, heartbeat_at)
VALUES ($1, $2, $3, $4, coalesce($5::timestamptz, now()), coalesce($5::timestamptz, now()))
ON CONFLICT (id) DO UPDATE
SET heartbeat_at = excluded.heartbeat_at,
    queues = excluded.queues,
    concurrency = excluded.concurrency
