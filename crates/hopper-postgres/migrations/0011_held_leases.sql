-- Lease renewals that could not be written on their job row because another transaction
-- held it (a `SELECT … FOR UPDATE`, an admin's uncommitted `UPDATE`): job_extend_many.sql
-- skips held rows rather than wait on them, and notes the renewal here instead. The
-- rescuer (job_rescue_expired.sql) leaves a running job alone while a note of its attempt
-- is current, so a hold that outlasts the lease does not make the job run twice once the
-- row is free; it deletes the notes that have expired. A row exists only while some job
-- row is held at a renewal: the table stays near empty.
--
-- No foreign key to `jobs`: checking it would lock the job row, the one that is held.
CREATE TABLE hopper.held_leases (
    job_id     uuid PRIMARY KEY,
    attempt    integer NOT NULL,
    expires_at timestamptz NOT NULL
);
