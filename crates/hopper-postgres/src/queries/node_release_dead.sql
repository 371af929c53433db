-- Releases at once every running job of dead nodes, and forgets those nodes (seed 004's
-- node lock key). Each release counts as a failed attempt, as for an expired lease: a job
-- that kills its worker must reach its last attempt rather than kill workers for ever.
--
-- Dead means, with $3 false, silent: a heartbeat older than $1 ms. With $3 true, vanished:
-- a registered holder of a liveness lock whose lock is free, because the session that held
-- it ended (its process died, or its connection did). The lock of each such node is taken
-- for this transaction (a transaction-level try on the same key): a live node's lock is
-- held by its session, so the try fails and the node is left alone; a node re-taking its
-- lock cannot do so in the middle of its own release; two nodes checking at once do not
-- both release it. A lock taken before the server (re)started proves nothing: a restart
-- or a failover ends every session; such nodes take their lock again, or are found dead by
-- their heartbeat. That check runs every 500 ms on every node: it reads the few rows of
-- `nodes` and tries one lock per registered holder, and with no vanished node it writes
-- nothing (docs/reliability.md measures it).
-- With $5, the one node taken is $5, which stops (Backend::node_deregister,
-- node_deregister.sql): what still runs under it once its last outcome was written (a
-- handler that did not stop by the shutdown deadline, an outcome that could not be
-- written) is released the same way.
-- Index for the release: jobs_running_idx (the running jobs only); for the check that no
-- job of a node is left, the same, once per node found.
-- A job row another transaction holds (a `SELECT … FOR UPDATE` or an uncommitted change
-- left open) is skipped, not waited for: every node runs this check, and waiting would
-- stop each one's rescuer. The skipped job keeps its lease, and its node keeps its row, so
-- the next check finds the node again and releases the job once it is free: a node is
-- forgotten only with its last running job, or a job whose lease was moved far ahead would
-- stay running, under a node nobody looks at, until then. A held node row is skipped too:
-- a row held past the silent bound looks silent (its node cannot write its heartbeat), and
-- deleting it would wait on the holder. Its node's heartbeat is queued on the row first,
-- and writes it once it runs again, but a check between the holder's commit and that write
-- would find the row free and silent (the queue on a row orders waiters, not a newcomer
-- that need not wait). So a silent node that holds its liveness lock on this server is
-- alive and left alone: the same try as for a vanished node, which a live session makes
-- fail. Its leases still expire if it stopped renewing them. Nodes without liveness
-- (remote workers, behind a transaction pooler) are judged by their heartbeat alone.
-- The CASEs fix the order: a lock is tried only for a node already found silent.
-- $1 dead after (ms), $2 now, $3 vanished, $4 most entries of an error history kept
-- (job_fail_many.sql), $5 the node that stops (NULL for the check of dead nodes).
-- Attempts used are counted in bigint: a count written by hand at either end of integer
-- must not make the statement fail for every job it takes.
WITH found AS (
    SELECT id
    FROM hopper.nodes
    WHERE CASE WHEN $5::uuid IS NOT NULL
               THEN id = $5
               WHEN $3::boolean
               THEN liveness_key IS NOT NULL
                    AND liveness_epoch = pg_postmaster_start_time()
                    AND pg_try_advisory_xact_lock(liveness_key)
               WHEN heartbeat_at >= coalesce($2::timestamptz, now())
                                    - make_interval(secs => $1::bigint / 1000.0)
               THEN false
               WHEN liveness_key IS NOT NULL
                    AND liveness_epoch = pg_postmaster_start_time()
               THEN pg_try_advisory_xact_lock(liveness_key)
               ELSE true
          END
    FOR UPDATE SKIP LOCKED
),
free AS (
    SELECT k.id
    FROM hopper.jobs AS k, found
    WHERE k.state = 'running'
      AND k.node_id = found.id
    ORDER BY k.id
    FOR NO KEY UPDATE OF k SKIP LOCKED
),
forgotten AS (
    DELETE FROM hopper.nodes AS n
    USING found AS f
    WHERE n.id = f.id
      AND NOT EXISTS (
          SELECT 1
          FROM hopper.jobs AS k
          WHERE k.state = 'running'
            AND k.node_id = n.id
            AND k.id <> ALL (ARRAY(SELECT l.id FROM free AS l))
      )
),
released AS (
    UPDATE hopper.jobs AS j
    SET state = CASE WHEN j.attempt::bigint - j.uncounted >= j.max_attempts
                     THEN 'failed' ELSE 'available' END::hopper.job_state,
        finished_at = CASE WHEN j.attempt::bigint - j.uncounted >= j.max_attempts
                           THEN coalesce($2::timestamptz, now()) END,
        run_at = coalesce($2::timestamptz, now()),
        errors = hopper.error_history_pushed(j.errors, jsonb_build_object(
            'attempt', j.attempt,
            'at', coalesce($2::timestamptz, now()),
            'error', 'node ' || j.node_id || CASE
                WHEN $5::uuid IS NOT NULL
                THEN ' stopped while this job still ran (its handler had not ended by the '
                     || 'shutdown deadline, or its outcome could not be written)'
                WHEN $3::boolean
                THEN ' vanished: its liveness lock was released (its process or connection ended)'
                ELSE ' stopped heartbeating' END,
            'node', j.node_id,
            'duration_ms', NULL), $4),
        lease_expires_at = NULL
    WHERE j.id = ANY (ARRAY(SELECT f.id FROM free AS f))
    RETURNING j.queue, j.state
),
woken AS (
    SELECT pg_notify('hopper_wake', 'a:' || queue)
    FROM (SELECT DISTINCT queue FROM released WHERE state = 'available') AS q
)
SELECT (SELECT count(*) FROM released), (SELECT count(*) FROM woken)
