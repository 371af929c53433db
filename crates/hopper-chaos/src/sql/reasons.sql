-- Why superseded runs were superseded: the error hopper recorded for that attempt (its
-- first words, which name the cause without the ids), counted.
WITH superseded AS (
    SELECT x.job_id, x.attempt, j.uncounted, j.errors
    FROM chaos.executions x
    JOIN hopper.jobs j ON j.id = x.job_id
    WHERE j.state = 'completed' AND x.attempt < j.attempt
)
SELECT coalesce(left(regexp_replace(err.error, '[0-9a-f-]{36}|[0-9]+', '#', 'g'), 90),
                '(no error recorded for the attempt)') AS reason,
       count(*)
FROM superseded s
LEFT JOIN LATERAL (
    SELECT e->>'error' AS error
    FROM jsonb_array_elements(s.errors) e
    WHERE (e->>'attempt')::integer IN (s.attempt, s.attempt - s.uncounted)
    LIMIT 1
) err ON true
GROUP BY 1
ORDER BY 2 DESC
