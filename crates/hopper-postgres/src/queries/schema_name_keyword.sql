-- PgBackend::connect: what the server's parser makes of the schema name $1, when it is a
-- key word that hopper's SQL cannot splice in unquoted. Reserved words (`select`) fail as
-- a schema of `CREATE SCHEMA`; the other two kinds pass there and fail in a type name
-- (`'x'::time.job_state`, `left.job_state`), so every kind but the unreserved is refused.
-- The server's own list, so the check is right for its version.
SELECT catdesc
FROM pg_catalog.pg_get_keywords()
WHERE word = $1
  AND catcode <> 'U'
