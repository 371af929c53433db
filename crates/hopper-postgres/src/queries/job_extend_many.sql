-- Heartbeat: moves the leases still held to $3 ms from now, never earlier than they were
-- (a heartbeat after a handler's longer extend keeps the longer). Returns the ids kept: those
-- extended, and those another transaction holds right now, whose rows are not extended
-- this time (the renewal is noted in held_leases) but which are not lost either.
-- $1 ids, $2 attempts, $3 lease (ms), $4 now.
--
-- Never waits on another transaction's row lock: one runtime (or `hopper serve`) extends
-- every lease it holds in this one statement, so a job row held by an open transaction (a
-- `SELECT … FOR UPDATE`, an admin's `UPDATE` left uncommitted) would stop every other
-- lease from being renewed until it commits, and the rescuer would take those jobs back
-- and run them twice. The rows are locked first with SKIP LOCKED; a held row is left
-- alone, and its renewal is noted in held_leases instead (no lock on the job row), which
-- keeps the rescuer off the job until the note expires, however long the hold lasts.
-- A note, as a lease, never moves earlier for the same attempt.
--
-- Index: jobs_pkey, one probe per input row to lock it (and to find the held ones); the
-- update then takes the locked ids as one array, `id = ANY`, as job_claim.sql does.
-- The state is tested as text on purpose: `j.state = 'running'` matches the partial
-- index jobs_running_idx, whose row estimate is often 1 (statistics taken while nothing
-- ran); the planner then loops over every running job and rescans the whole input for
-- each, O(running x batch): measured 0.6-8 s for a batch of 1,000 with 3,000 jobs
-- running. As text, only the primary key fits.
-- Locks: taken in job id order (ORDER BY), as the outcomes take theirs (the caller sorts
-- them by id); two statements over the same rows then never deadlock.
WITH lease AS (
    SELECT * FROM unnest($1::uuid[], $2::integer[]) AS f(id, attempt)
),
locked AS MATERIALIZED (
    SELECT k.id
    FROM hopper.jobs AS k, lease AS f
    WHERE k.id = f.id
      AND k.attempt = f.attempt
      AND k.state::text = 'running'
    ORDER BY k.id
    FOR NO KEY UPDATE OF k SKIP LOCKED
),
extended AS (
    UPDATE hopper.jobs AS j
    SET lease_expires_at = greatest(
        j.lease_expires_at,
        coalesce($4::timestamptz, now()) + make_interval(secs => $3::bigint / 1000.0)
    )
    WHERE j.id = ANY (ARRAY(SELECT l.id FROM locked AS l))
    RETURNING j.id
),
held AS (
    SELECT h.id, h.attempt
    FROM hopper.jobs AS h, lease AS f
    WHERE h.id = f.id
      AND h.attempt = f.attempt
      AND h.state::text = 'running'
      AND h.id NOT IN (SELECT l.id FROM locked AS l)
),
noted AS (
    INSERT INTO hopper.held_leases AS n (job_id, attempt, expires_at)
    SELECT h.id, h.attempt,
           coalesce($4::timestamptz, now()) + make_interval(secs => $3::bigint / 1000.0)
    FROM held AS h
    ON CONFLICT (job_id) DO UPDATE
    SET attempt = excluded.attempt,
        expires_at = CASE WHEN n.attempt = excluded.attempt
                          THEN greatest(n.expires_at, excluded.expires_at)
                          ELSE excluded.expires_at END
)
SELECT e.id FROM extended AS e
UNION ALL
SELECT h.id FROM held AS h
