-- hopper::testing: the newest jobs as the caller's transaction sees them (its own
-- uncommitted inserts included), each row one JSON object that decodes into a JobRecord
-- (the columns are named as its fields; the extra ones are ignored). Tests only, never on a
-- hot path: it reads the primary key backwards, at most $1 rows.
SELECT to_jsonb(j)
FROM hopper.jobs AS j
ORDER BY j.id DESC
LIMIT $1
