-- hopper's SQLite schema, version 4: job metadata (docs/job-meta-and-logs.md), a JSON
-- object beside the arguments for what is about the job rather than its work: the W3C
-- trace context of the span that enqueued it (meta.traceparent), a tenant, a user.
-- TEXT checked like args; every existing row takes the default '{}'. No index: the
-- containment search of job_list.sql/job_search.sql filters the rows it walks by the
-- primary key, like their other filters (an admin query, not a hot one).
ALTER TABLE hopper_jobs ADD COLUMN meta TEXT NOT NULL DEFAULT '{}'
    CHECK (json_valid(meta) AND json_type(meta) = 'object');

DROP VIEW hopper_job_view;
CREATE VIEW hopper_job_view AS
SELECT id, queue, kind, args, state, priority,
       strftime('%Y-%m-%dT%H:%M:%fZ', run_at / 1000000.0, 'unixepoch') AS run_at,
       attempt - uncounted AS attempts_used, max_attempts, attempt AS lease_attempt,
       node_id,
       strftime('%Y-%m-%dT%H:%M:%fZ', lease_expires_at / 1000000.0, 'unixepoch') AS lease_expires_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', created_at / 1000000.0, 'unixepoch') AS created_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', attempted_at / 1000000.0, 'unixepoch') AS attempted_at,
       strftime('%Y-%m-%dT%H:%M:%fZ', finished_at / 1000000.0, 'unixepoch') AS finished_at,
       duration_ms,
       json_array_length(errors) AS error_count,
       errors ->> '$[#-1].error' AS last_error,
       group_key, unique_key, meta
FROM hopper_jobs;
