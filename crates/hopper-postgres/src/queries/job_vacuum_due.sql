-- Is the job table due for the vacuum hopper runs itself? $1 the least time between two
-- vacuums, in ms.
--
-- Each claim and each outcome leaves a dead row version and dead index entries behind.
-- Autovacuum normally reclaims them; where it is off (as on the CI machines here) or far
-- behind, dead entries pile up at the head of the claim index and every claim steps over
-- them: a 10-minute soak lost half its throughput that way. Due: more dead than live rows
-- allow (1,000 + 10% of live, autovacuum's own rule with a lower scale factor) and no
-- vacuum, ours or autovacuum's, within $1. The counters come from the statistics system,
-- up to a second late: good enough for a check every few seconds.
SELECT coalesce(bool_or(
           s.n_dead_tup > 1000 + 0.1 * s.n_live_tup
           AND coalesce(greatest(s.last_vacuum, s.last_autovacuum), '-infinity')
               < now() - make_interval(secs => $1::bigint / 1000.0)), false)
FROM pg_stat_user_tables AS s
WHERE s.relid = 'hopper.jobs'::regclass
