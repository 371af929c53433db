-- Tests: has the schema's log stores fail, the first ones (or all) with a SQLSTATE of the
-- test's choice, to provoke real database failures in whatever stores job logs (the
-- runtime, `hopper serve`). Run with the test schema first in `search_path`; the function
-- keeps that path (`SET search_path FROM CURRENT`), whichever session fires it.
--
-- Every statement that stores lines in `job_logs` is counted by a sequence (a failed
-- statement's rollback does not undo `nextval`); while the count is at most
-- `log_store_faults.failures`, the statement fails with `log_store_faults.sqlstate`. No
-- row in `log_store_faults`: nothing fails, stores are only counted.
CREATE TABLE log_store_faults (failures bigint NOT NULL, sqlstate text NOT NULL);
CREATE SEQUENCE log_store_attempts;
CREATE FUNCTION fail_log_store() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    n bigint := nextval('log_store_attempts');
    fault log_store_faults%ROWTYPE;
BEGIN
    SELECT * INTO fault FROM log_store_faults LIMIT 1;
    IF FOUND AND n <= fault.failures THEN
        RAISE EXCEPTION 'log store % failed by the test', n USING ERRCODE = fault.sqlstate;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER fail_log_store BEFORE INSERT ON job_logs
FOR EACH STATEMENT EXECUTE FUNCTION fail_log_store();
