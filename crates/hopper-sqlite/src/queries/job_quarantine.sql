-- Statement 1: the columns of one job (:id) whose decoding the caller checks on its own
-- (SQL cannot tell whether serde reads them): its arguments, its error history and its
-- metadata. Index: the primary key.
SELECT args, errors, meta
FROM hopper_jobs
WHERE id = :id;

-- Statement 2: moves that job, whose row hopper could not read (an instant beyond what it
-- reads, a count beyond 32 bits, arguments or an error history that do not decode:
-- written by hand, by an older version, by a bug), to 'failed' with :reason appended to
-- its error history (a job already completed or cancelled keeps its state, and its
-- finishing time if that reads), and makes the row readable again: every instant outside
-- [:min_us, :max_us] (the range of hopper_core::limits) becomes :now (NULL where the
-- column may be NULL), counts are clamped to 32 bits, arguments that do not decode
-- (:args_ok = 0) become an object holding their text, and so does metadata (:meta_ok = 0,
-- under unreadable_meta), an error history that does not
-- decode (:errors_ok = 0) is replaced by one holding its text. The SET expressions read
-- the row as it was. A row this cannot make readable (an id that is no UUID) is moved
-- once: when its history already ends with :reason, nothing is written, so reading it again
-- does not grow its history. Index: the primary key. Rare: only rows that failed to
-- decode.
UPDATE hopper_jobs
SET state = CASE WHEN state IN ('completed', 'cancelled') THEN state ELSE 'failed' END,
    run_at = CASE WHEN run_at BETWEEN :min_us AND :max_us THEN run_at ELSE :now END,
    created_at = CASE WHEN created_at BETWEEN :min_us AND :max_us THEN created_at ELSE :now END,
    attempted_at = CASE WHEN attempted_at BETWEEN :min_us AND :max_us THEN attempted_at END,
    finished_at = CASE WHEN state IN ('completed', 'cancelled', 'failed')
                            AND finished_at BETWEEN :min_us AND :max_us
                       THEN finished_at ELSE :now END,
    lease_expires_at = NULL,
    attempt = max(0, min(attempt, 2147483647)),
    uncounted = max(0, min(uncounted, 2147483647)),
    max_attempts = min(max_attempts, 2147483647),
    args = CASE WHEN :args_ok THEN args
                ELSE json_object('unreadable_args', substr(args, 1, 65536)) END,
    meta = CASE WHEN :meta_ok THEN meta
                ELSE json_object('unreadable_meta', substr(meta, 1, 65536)) END,
    errors = json_insert(
        CASE WHEN :errors_ok THEN errors
             ELSE json_array(json_object(
                 'attempt', max(0, min(attempt, 2147483647)),
                 'at', :now_text,
                 'error', 'unreadable error history: ' || substr(errors, 1, 4096),
                 'node', NULL,
                 'duration_ms', NULL)) END,
        '$[#]', json_object(
            'attempt', max(0, min(attempt, 2147483647)),
            'at', :now_text,
            'error', :reason,
            'node', NULL,
            'duration_ms', NULL))
WHERE id = :id
  AND NOT (json_valid(errors) AND json_extract(errors, '$[#-1].error') IS :reason);
