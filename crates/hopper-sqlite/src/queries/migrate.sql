-- The bookkeeping of migrations, run by `migrate` inside one `BEGIN IMMEDIATE`
-- transaction (so a second process waits, then finds nothing left to do).
-- Statement 1: the table of applied migrations.
CREATE TABLE IF NOT EXISTS hopper_migrations (
    version    INTEGER PRIMARY KEY NOT NULL,
    name       TEXT NOT NULL,
    applied_at INTEGER NOT NULL
) STRICT;

-- Statement 2: the version the database is at (0 when new).
SELECT coalesce(max(version), 0) FROM hopper_migrations;

-- Statement 3: records one applied migration.
INSERT INTO hopper_migrations (version, name, applied_at)
VALUES (:version, :name, :now);
