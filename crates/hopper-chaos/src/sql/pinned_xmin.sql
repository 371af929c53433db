-- The xmin this session holds (NULL when it holds none).
SELECT backend_xmin::text FROM pg_stat_activity WHERE pid = pg_backend_pid()
