-- The jobs table's tuples and sizes, for the load samples. n_live_tup / n_dead_tup are the
-- statistics system's estimates (updated as transactions end and by vacuum).
SELECT s.n_live_tup,
       s.n_dead_tup,
       pg_relation_size(s.relid),
       pg_indexes_size(s.relid),
       pg_relation_size('hopper.jobs_claim_idx'::regclass),
       s.autovacuum_count + s.vacuum_count
FROM pg_stat_user_tables s
WHERE s.schemaname = 'hopper'
  AND s.relname = 'jobs'
