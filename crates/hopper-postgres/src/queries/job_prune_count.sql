-- Retention, dry run: counts the jobs job_prune.sql would delete (all of them, not one
-- batch), locking nothing. Same bounds and the same primary-key range scan; see there.
-- $1 retention of completed and cancelled jobs (ms), $2 retention of failed jobs (ms),
-- $3 now.
WITH cutoff AS (
    SELECT coalesce($3::timestamptz, now()) AS now,
           coalesce($3::timestamptz, now()) - make_interval(secs => $1::bigint / 1000.0) AS done_before,
           coalesce($3::timestamptz, now()) - make_interval(secs => $2::bigint / 1000.0) AS failed_before
),
bound AS (
    SELECT now,
           done_before,
           failed_before,
           (lpad(to_hex(floor(extract(epoch FROM greatest(done_before, failed_before)) * 1000)::bigint), 12, '0')
            || '00000000000000000000')::uuid AS below_id
    FROM cutoff
)
SELECT true,
       count(*) FILTER (WHERE j.state = 'completed' AND j.finished_at < b.done_before),
       count(*) FILTER (WHERE j.state = 'cancelled' AND j.finished_at < b.done_before),
       count(*) FILTER (WHERE j.state = 'failed' AND j.finished_at < b.failed_before)
FROM hopper.jobs AS j, bound AS b
WHERE j.id < b.below_id
  AND j.state IN ('completed', 'cancelled', 'failed')
  AND (j.unique_until IS NULL OR j.unique_until <= b.now)
