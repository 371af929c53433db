-- Moves jobs whose rows hopper could not read (an infinite run_at written by hand, a
-- column from an older version, a bug) to 'failed', with the reason appended to their
-- error history, and makes the row readable again; a job already finished (completed or
-- cancelled) keeps its state and its finishing time if that reads: every instant outside
-- the range of hopper_core::limits becomes now (NULL where the column may be NULL), and
-- an error history ($4), arguments ($5) or metadata ($6) that serde_json does not read
-- (job_json_texts.sql, checked by the caller: SQL cannot tell) are replaced by what holds
-- their text, as on SQLite.
-- A row another transaction holds is skipped, not waited for: the quarantine runs after a
-- claim and inside reads (a listing, a job's page), which one held row must not stop,
-- whatever the pool's lock bound (the runtime's has none). The ids moved come back; the
-- caller tries the others again later.
-- $1 ids, $2 reasons, $3 now, $4 the ids whose history does not decode, $5 and $6 those
-- whose arguments and metadata do not. Index: jobs_pkey, one probe per id. Rare: only
-- rows that failed to decode come here.
WITH free AS (
    SELECT b.id, b.reason
    FROM unnest($1::uuid[], $2::text[]) AS b(id, reason)
    JOIN hopper.jobs AS k ON k.id = b.id
    FOR UPDATE OF k SKIP LOCKED
)
UPDATE hopper.jobs AS j
SET state = CASE WHEN j.state IN ('completed', 'cancelled') THEN j.state
                 ELSE 'failed' END::hopper.job_state,
    run_at = CASE WHEN j.run_at BETWEEN timestamptz '1970-01-01 00:00:00+00'
                                    AND timestamptz '9999-12-31 23:59:59.999999+00'
                  THEN j.run_at ELSE coalesce($3::timestamptz, now()) END,
    created_at = CASE WHEN j.created_at BETWEEN timestamptz '1970-01-01 00:00:00+00'
                                            AND timestamptz '9999-12-31 23:59:59.999999+00'
                      THEN j.created_at ELSE coalesce($3::timestamptz, now()) END,
    attempted_at = CASE WHEN j.attempted_at BETWEEN timestamptz '1970-01-01 00:00:00+00'
                                                AND timestamptz '9999-12-31 23:59:59.999999+00'
                        THEN j.attempted_at END,
    finished_at = CASE WHEN j.state IN ('completed', 'cancelled', 'failed')
                        AND j.finished_at BETWEEN timestamptz '1970-01-01 00:00:00+00'
                                              AND timestamptz '9999-12-31 23:59:59.999999+00'
                       THEN j.finished_at ELSE coalesce($3::timestamptz, now()) END,
    lease_expires_at = NULL,
    args = CASE WHEN j.id = ANY ($5::uuid[])
                THEN jsonb_build_object('unreadable_args', left(j.args::text, 65536))
                ELSE j.args END,
    meta = CASE WHEN j.id = ANY ($6::uuid[])
                THEN jsonb_build_object('unreadable_meta', left(j.meta::text, 65536))
                ELSE j.meta END,
    errors = CASE
            WHEN j.id <> ALL ($4::uuid[]) THEN j.errors
            ELSE jsonb_build_array(jsonb_build_object(
                'attempt', j.attempt,
                'at', coalesce($3::timestamptz, now()),
                'error', 'unreadable error history: ' || left(j.errors::text, 4096),
                'node', NULL,
                'duration_ms', NULL))
        END || jsonb_build_object(
            'attempt', j.attempt,
            'at', coalesce($3::timestamptz, now()),
            'error', b.reason,
            'node', NULL,
            'duration_ms', NULL)
FROM free AS b
WHERE j.id = b.id
RETURNING j.id
