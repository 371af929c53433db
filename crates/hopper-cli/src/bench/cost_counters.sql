-- The counters W3's cost per job is taken from, read before and after the drain.
-- wal_bytes: the WAL insert position (exact, cluster-wide, no reporting delay);
-- wal_records, wal_fpi: pg_stat_wal (cluster-wide, PostgreSQL ≥ 14; backends report them
-- when idle, at most once a second); commits: pg_stat_database.xact_commit of this
-- database (every committed transaction, read-only ones included, same reporting).
SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint AS wal_bytes,
       w.wal_records::bigint,
       w.wal_fpi::bigint,
       d.xact_commit::bigint AS commits
FROM pg_stat_wal w, pg_stat_database d
WHERE d.datname = current_database()
