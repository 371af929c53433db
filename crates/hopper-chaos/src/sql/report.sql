-- The end-of-run counts. A job's final attempt is the lease that completed it (a claim is
-- the only thing that raises `attempt`, and completion keeps it). A run of an earlier
-- attempt was superseded: that attempt's lease expired or was released (node dead, worker
-- dropped by the server, handler error), which is the at-least-once contract. Any other
-- extra run is unexplained: two runs under one lease, or a run after the completion.
WITH jobs AS (
    SELECT e.job_id, j.state::text AS state, j.attempt
    FROM chaos.expected e
    LEFT JOIN hopper.jobs j ON j.id = e.job_id
), runs AS (
    SELECT x.job_id, x.attempt, count(*) AS n
    FROM chaos.executions x
    GROUP BY x.job_id, x.attempt
), judged AS (
    SELECT r.n,
           CASE WHEN j.state IS DISTINCT FROM 'completed' THEN 'unfinished'
                WHEN r.attempt < j.attempt THEN 'superseded'
                WHEN r.attempt = j.attempt THEN 'current'
                ELSE 'after_completion' END AS verdict
    FROM runs r
    JOIN jobs j ON j.job_id = r.job_id
)
SELECT
    (SELECT count(*) FROM jobs),
    (SELECT count(*) FROM jobs WHERE state = 'completed'),
    (SELECT count(*) FROM jobs WHERE state IS DISTINCT FROM 'completed'),
    (SELECT count(*) FROM (SELECT job_id FROM chaos.completions
                           GROUP BY job_id HAVING count(*) > 1) d),
    (SELECT count(*) FROM chaos.completions c JOIN jobs j USING (job_id)
     WHERE c.attempt <> j.attempt),
    (SELECT coalesce(sum(n), 0)::bigint FROM runs),
    (SELECT coalesce(sum(n), 0)::bigint FROM judged WHERE verdict = 'superseded'),
    (SELECT coalesce(sum(n - 1), 0)::bigint FROM judged WHERE verdict = 'current'),
    (SELECT coalesce(sum(n), 0)::bigint FROM judged WHERE verdict = 'after_completion'),
    (SELECT coalesce(sum(n), 0)::bigint FROM judged WHERE verdict = 'unfinished'),
    (SELECT count(*) FROM jobs j WHERE state = 'completed'
     AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.job_id = j.job_id AND r.attempt = j.attempt)),
    (SELECT count(*) FROM (SELECT DISTINCT worker, pid FROM chaos.executions) w)
