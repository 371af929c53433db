-- PgBackend::jobs_in, for hopper::testing: the newest jobs as the caller's transaction
-- sees them (its own uncommitted inserts included), each row one JSON object that decodes
-- into a JobRecord:
-- the columns are named as its fields, but group_key, which is added as "group"; the other
-- extra columns are ignored. Tests only, never on a hot path: it reads the primary key
-- backwards, at most $1 rows.
SELECT to_jsonb(j) || jsonb_build_object('group', j.group_key)
FROM hopper.jobs AS j
ORDER BY j.id DESC
LIMIT $1
