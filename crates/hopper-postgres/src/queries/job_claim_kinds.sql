-- Claims up to $3 available jobs of queue $1 whose kind is one of $6, for node $2; each
-- claim is a new attempt. $4 lease in ms (the lease is min(job timeout, $4)), $5 now (NULL:
-- the database's clock). The RETURNING columns are job_claim.sql's.
--
-- For `hopper serve`, when every worker with room in the queue declared the kinds it runs:
-- jobs of other kinds stay where they are, untouched, instead of being claimed and put back
-- (which moved their run_at every time and hid their age). The plain claim (job_claim.sql)
-- is unchanged and used whenever some worker takes any kind, and by every runtime.
--
-- Index: jobs_claim_idx (hashtextextended(queue, 0), priority, run_at, id) WHERE state =
-- 'available', walked from its head in claim order; `kind` is not in it, so each entry is
-- checked against $6 on its heap row and entries of other kinds are stepped over. A claim
-- therefore reads the jobs of unserved kinds that sort before the ones it takes: cheap
-- while those are few, proportional to their number otherwise (no index on kind, which
-- would cost every insert and claim of every queue a third index entry). Such a claim that
-- finds nothing leaves the queue idle in the server until a notification says it has new
-- jobs, so the cost is paid per wake-up, not per poll.
--
-- No claim cursor (cursor.rs): while the xmin horizon is pinned this walks the dead entries
-- at the head as the plain claim did before the cursor. Where every job is of a served kind
-- the filter passes every row; hopper-server's tests/drain.rs (10,000 jobs, 4 remote
-- workers, debug build, load 6, alternated) drained 1,884 / 2,908 / 3,367 / 2,267 jobs/s
-- with this statement against 2,775 / 2,899 / 1,773 / 2,934 with job_claim.sql: no
-- difference beyond the noise.
WITH picked AS (
    SELECT id
    FROM hopper.jobs
    WHERE state = 'available'
      AND hashtextextended(queue, 0) = hashtextextended($1, 0)
      AND queue = $1
      AND kind = ANY ($6::text[])
    ORDER BY priority, run_at, id
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE hopper.jobs AS j
SET state = 'running',
    attempt = j.attempt + 1,
    node_id = $2,
    attempted_at = coalesce($5::timestamptz, now()),
    lease_expires_at = coalesce($5::timestamptz, now())
                       + make_interval(secs => least(j.timeout_ms, $4::integer) / 1000.0)
WHERE j.id = ANY (ARRAY(SELECT id FROM picked))
RETURNING j.id, j.attempt, j.queue, j.kind, j.args, j.priority, j.attempt - j.uncounted,
          j.max_attempts, j.timeout_ms, j.created_at, j.run_at,
          clock_timestamp(), statement_timestamp()
