-- Claims up to $3 available jobs of queue $1 for node $2; each claim is a new attempt.
-- $4 lease in ms (the lease is min(job timeout, $4)), $5 now (NULL: the database's clock).
-- $6, $7, $8: where to start, a key (priority, run_at, id) of jobs_claim_idx; only jobs
-- sorting after it are read. NULL (all three): from the head of the index. The head's
-- stand-in (-32768, -infinity, the nil uuid) is below every key hopper writes (ids are
-- UUIDv7, never nil). The last two columns say when the row was written and when the
-- statement started, by the database's own clock: cursor.rs uses the difference to tell a
-- slow walk of the index head (dead entries, see below) from a slow commit or a busy
-- client. (Two timestamps, not their difference in ms: `extract` makes a numeric per row.)
--
-- Index: jobs_claim_idx (hashtextextended(queue, 0), priority, run_at, id) WHERE state =
-- 'available' (migration 0005 says why the hash). The inner SELECT walks that index from
-- its start for one queue and stops after $3 unlocked rows, so its cost depends on the batch size, not on the backlog: scheduled, running and finished
-- jobs are not in the index at all. SKIP LOCKED lets concurrent claimers pass each other's
-- rows instead of queueing behind them.
--
-- The claimed rows leave the partial index (state changes), so the next claim does not
-- step over them; their dead index entries are cleaned by index-tuple killing and vacuum.
-- Unless the xmin horizon is pinned (a transaction left open, a replication slot): then an
-- entry whose old row version the pinned snapshot can still see is neither removed nor
-- even marked LP_DEAD, and a claim from the head walks every entry claimed since the pin,
-- visiting the heap for each. Hence the bound ($6-$8): while head claims are slow,
-- cursor.rs passes the greatest key this process claimed, and the index scan starts there
-- (the queue's hash `= … AND ROW(priority, run_at, id) > ROW(...)` is one Index Cond; the btree
-- descends straight to it, also as a generic plan), with a head claim every second (or
-- five times the last one's duration) for jobs that sort before it. While head claims are
-- fast, every claim passes NULL and the order is exactly the head's.
--
-- Figures: W3 drains 100,000 no-op jobs at about 0.9 x L2 with this claim; every strategy
-- tried and its measurements are in docs/benchmarks.md ("Claim strategies measured").
--
-- $9: only jobs of these kinds (hopper serve, when every worker with room in the queue
-- declared the kinds it runs); every kind when NULL. `kind` is not in the index, so each
-- entry is checked on its heap row and jobs of other kinds are stepped over, untouched
-- (no index on kind: it would cost every insert and claim a third index entry). Such
-- claims pass no cursor ($6-$8 NULL) and do not move it.
--
-- A count written by hand past what a lease can count stops nothing: the attempt is raised
-- at most to 2147483647 (`least`: `+ 1` past it would make the whole statement fail, and
-- with it every claim of the queue), and attempts used are returned as bigint (an
-- `uncounted` at either end of integer overflows a 32-bit difference); the caller fails
-- such a job as unreadable (scheduling.rs, `claimed_job`).
WITH picked AS (
    SELECT id
    FROM hopper.jobs
    WHERE state = 'available'
      AND hashtextextended(queue, 0) = hashtextextended($1, 0)
      AND queue = $1
      AND (priority, run_at, id) > (coalesce($6::smallint, (-32768)::smallint),
                                    coalesce($7::timestamptz, '-infinity'::timestamptz),
                                    coalesce($8::uuid, '00000000-0000-0000-0000-000000000000'))
      AND ($9::text[] IS NULL OR kind = ANY ($9::text[]))
    ORDER BY priority, run_at, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE hopper.jobs AS j
SET state = 'running',
    attempt = least(j.attempt, 2147483646) + 1,
    node_id = $2,
    attempted_at = coalesce($5::timestamptz, now()),
    lease_expires_at = coalesce($5::timestamptz, now())
                       + make_interval(secs => least(j.timeout_ms, $4::integer) / 1000.0)
WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
RETURNING j.id, j.attempt, j.queue, j.kind, j.args, j.priority, j.attempt::bigint - j.uncounted,
          j.max_attempts, j.timeout_ms, j.created_at, j.run_at, j.meta,
          clock_timestamp(), statement_timestamp()
