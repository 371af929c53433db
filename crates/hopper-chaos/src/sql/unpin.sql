-- Releases the snapshot of pin.sql.
COMMIT
