-- One definition of how an attempt's error joins a job's error history, for the failed,
-- rescued and dead-node paths (job_fail_many.sql, job_rescue_expired.sql,
-- node_release_dead.sql), as hopper_core::limits::error_history_pushed gives it: `entry`
-- appended, the latest `keep` entries kept (hopper_core::limits::MAX_ERROR_HISTORY, passed
-- by the caller). The oldest are cut only once the history is full, so a short one costs
-- one length check. A history that is not an array (only one written by hand can be)
-- becomes `[entry]`. One SQL expression in which `entry` (the one costly argument)
-- appears once, declared STABLE as jsonb_build_object is (an IMMUTABLE declaration would
-- not be inlined): the planner inlines it into each statement, as if written there.
CREATE FUNCTION hopper.error_history_pushed(errors jsonb, entry jsonb, keep integer)
RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN jsonb_typeof(errors) IS DISTINCT FROM 'array' THEN '[]'::jsonb
        WHEN jsonb_array_length(errors) >= keep
        THEN jsonb_path_query_array(
            errors, '$[last - $keep + 2 to last]', jsonb_build_object('keep', keep))
        ELSE errors
    END || jsonb_build_array(entry)
$$;
