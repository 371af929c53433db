-- Claims up to :limit available jobs of :queue for :node; each claim is a new attempt.
-- The lease is min(job timeout, :lease_us) from :now. With :kinds (a JSON array of names;
-- NULL for every kind), only jobs of those kinds: `hopper serve` asks so when every worker
-- with room declared the kinds it runs, and jobs of other kinds stay untouched instead of
-- being claimed and put back (which moved their run_at and hid their age).
--
-- Index: hopper_jobs_claim_idx (queue, priority, run_at, id) WHERE state = 'available'.
-- The subquery walks that index from its start for one queue and stops after :limit
-- entries, so its cost depends on the batch size, not on the backlog: scheduled, running
-- and finished jobs are not in the index at all. EXPLAIN QUERY PLAN: the subquery is
-- "SEARCH hopper_jobs USING INDEX hopper_jobs_claim_idx (queue=?)" with no sort
-- step, the update "SEARCH … USING COVERING INDEX sqlite_autoindex_hopper_jobs_1 (id=?)"
-- per pick (checked by a test in src/sql.rs). `kind` is not in the index: with :kinds each
-- entry's row is read and entries of other kinds are stepped over, cheap while those are
-- few (an index on kind would cost every insert and claim).
--
-- Locking: SQLite has no row locks and no SKIP LOCKED; it has one writer at a time. This
-- statement runs inside `BEGIN IMMEDIATE`, which takes the database's write lock before
-- reading, so the rows picked cannot be picked by any other connection or process until
-- this transaction has committed them as `running`. Concurrent claimers queue on the
-- lock (busy_timeout) instead of skipping past each other; a claim holds it for well
-- under a millisecond per job.
-- The attempt is raised from at most 2147483647 (`min`): a count written by hand up to
-- 9223372036854775807 would overflow `+ 1` into a REAL the STRICT column refuses, and the
-- whole claim, every claim of the queue, would fail; a claimed attempt past 32 bits does
-- not read, and the job is failed as unreadable (poison.rs).
UPDATE hopper_jobs
SET state = 'running',
    attempt = min(attempt, 2147483647) + 1,
    node_id = :node,
    attempted_at = :now,
    lease_expires_at = :now + min(timeout_ms * 1000, :lease_us)
WHERE id IN (
    SELECT id
    FROM hopper_jobs
    WHERE state = 'available'
      AND queue = :queue
      AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
    ORDER BY priority, run_at, id
    LIMIT :limit
)
RETURNING id, attempt, queue, kind, args, priority, attempt - uncounted, max_attempts,
          timeout_ms, created_at, run_at, meta
