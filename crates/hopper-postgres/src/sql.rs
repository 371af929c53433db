//! The SQL text of every query and migration, loaded from the `.sql` files beside this
//! crate and bound to the configured schema.
//!
//! The files name the schema `hopper` and the wake-up channel `hopper_wake`. Binding
//! replaces both with the configured schema's names, once, when the backend is built. The
//! schema name is checked ([`hopper_core::policy::validate_sql_name`]) so the replacement cannot inject anything.

use tokio_postgres::types::Type;

pub use crate::statement::Query;

/// Rewrites SQL written against the `hopper` schema for `schema`.
pub fn bind(sql: &str, schema: &str) -> String {
    sql.replace("hopper.", &format!("{schema}."))
        .replace("'hopper_wake'", &format!("'{schema}_wake'"))
}

/// The migrations, in order: (version, name, SQL).
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "create_jobs",
        include_str!("../migrations/0001_create_jobs.sql"),
    ),
    (
        2,
        "scheduling_and_control",
        include_str!("../migrations/0002_scheduling_and_control.sql"),
    ),
    (
        3,
        "cheaper_name_checks",
        include_str!("../migrations/0003_cheaper_name_checks.sql"),
    ),
    (
        4,
        "names_checked_at_the_door",
        include_str!("../migrations/0004_names_checked_at_the_door.sql"),
    ),
    (
        5,
        "claim_index_keyed_by_queue_hash",
        include_str!("../migrations/0005_claim_index_keyed_by_queue_hash.sql"),
    ),
    (
        6,
        "unfinished_jobs",
        include_str!("../migrations/0006_unfinished_jobs.sql"),
    ),
    (
        7,
        "enqueue_bounds",
        include_str!("../migrations/0007_enqueue_bounds.sql"),
    ),
    (
        8,
        "node_liveness",
        include_str!("../migrations/0008_node_liveness.sql"),
    ),
    (
        9,
        "job_meta",
        include_str!("../migrations/0009_job_meta.sql"),
    ),
    (
        10,
        "job_logs",
        include_str!("../migrations/0010_job_logs.sql"),
    ),
    (
        11,
        "held_leases",
        include_str!("../migrations/0011_held_leases.sql"),
    ),
    (
        12,
        "any_unfinished_jobs",
        include_str!("../migrations/0012_any_unfinished_jobs.sql"),
    ),
    (
        13,
        "names_checked_by_every_function",
        include_str!("../migrations/0013_names_checked_by_every_function.sql"),
    ),
    (
        14,
        "enqueue_refuses_json_hopper_cannot_read",
        include_str!("../migrations/0014_enqueue_refuses_json_hopper_cannot_read.sql"),
    ),
    (
        15,
        "unique_window_end",
        include_str!("../migrations/0015_unique_window_end.sql"),
    ),
    (
        16,
        "error_history_pushed",
        include_str!("../migrations/0016_error_history_pushed.sql"),
    ),
];

macro_rules! queries {
    ($($name:ident($($ty:ident),*)),* $(,)?) => {
        /// Every query, bound to one schema, with its parameters' types (which the unnamed
        /// statements of a transaction pooler need: `statement.rs`). One field per `.sql`
        /// file in `src/queries/`.
        #[derive(Debug)]
        #[allow(missing_docs)]
        pub struct Queries {
            $(pub $name: Query,)*
        }

        impl Queries {
            /// Loads every query for `schema`.
            pub fn new(schema: &str) -> Self {
                Queries {
                    $($name: Query::new(
                        bind(include_str!(concat!("queries/", stringify!($name), ".sql")), schema),
                        &[$(Type::$ty),*],
                    ),)*
                }
            }

            /// Every query with its name, for the check of the declared types.
            pub fn all(&self) -> Vec<(&'static str, &Query)> {
                vec![$((stringify!($name), &self.$name)),*]
            }
        }
    };
}

queries!(
    cron_advance(TEXT, TIMESTAMPTZ, TIMESTAMPTZ, TIMESTAMPTZ, UUID),
    cron_list(),
    cron_register(
        TEXT,
        TEXT,
        TEXT,
        TEXT,
        TEXT,
        JSONB,
        INT2,
        INT4,
        INT4,
        BOOL,
        TIMESTAMPTZ,
        TIMESTAMPTZ
    ),
    job_attempts_exist(UUID_ARRAY, INT4_ARRAY),
    job_attempts_of_node(UUID_ARRAY, INT4_ARRAY, UUID),
    job_cancel(UUID, TIMESTAMPTZ),
    job_claim(
        TEXT,
        UUID,
        INT8,
        INT4,
        TIMESTAMPTZ,
        INT2,
        TIMESTAMPTZ,
        UUID,
        TEXT_ARRAY
    ),
    job_claim_fair(
        TEXT,
        UUID,
        INT8,
        INT4,
        TIMESTAMPTZ,
        TEXT_ARRAY,
        INT4,
        INT4,
        FLOAT8,
        TIMESTAMPTZ,
        UUID_ARRAY,
        BOOL,
        TEXT_ARRAY
    ),
    job_claim_flush(),
    job_claim_limited(
        TEXT,
        UUID,
        INT8,
        INT4,
        TIMESTAMPTZ,
        FLOAT8,
        TIMESTAMPTZ,
        TEXT_ARRAY
    ),
    job_clear(TEXT),
    job_complete_many(UUID_ARRAY, INT4_ARRAY, INT8_ARRAY, TIMESTAMPTZ),
    job_delete(UUID),
    job_extend_many(UUID_ARRAY, INT4_ARRAY, INT8, TIMESTAMPTZ),
    job_fail_many(
        UUID_ARRAY,
        INT4_ARRAY,
        TEXT_ARRAY,
        INT8_ARRAY,
        BOOL_ARRAY,
        INT8_ARRAY,
        TIMESTAMPTZ,
        INT4
    ),
    job_get(UUID),
    job_insert(
        UUID,
        TEXT,
        TEXT,
        JSONB,
        INT2,
        TIMESTAMPTZ,
        INT4,
        INT4,
        TIMESTAMPTZ,
        JSONB
    ),
    job_insert_full(
        UUID,
        TEXT,
        TEXT,
        JSONB,
        INT2,
        TIMESTAMPTZ,
        INT4,
        INT4,
        TIMESTAMPTZ,
        TEXT,
        TEXT,
        TIMESTAMPTZ,
        JSONB,
        TIMESTAMPTZ
    ),
    job_insert_many_copy(),
    job_insert_many_full(
        UUID_ARRAY,
        TEXT_ARRAY,
        TEXT_ARRAY,
        JSONB_ARRAY,
        INT2_ARRAY,
        TIMESTAMPTZ_ARRAY,
        INT4_ARRAY,
        INT4_ARRAY,
        TEXT_ARRAY,
        TEXT_ARRAY,
        TIMESTAMPTZ_ARRAY,
        TIMESTAMPTZ,
        JSONB_ARRAY,
        TIMESTAMPTZ_ARRAY
    ),
    job_log_append(
        UUID_ARRAY,
        INT4_ARRAY,
        JSONB_ARRAY,
        INT4_ARRAY,
        INT8_ARRAY,
        INT4
    ),
    job_log_append_around_held(
        UUID_ARRAY,
        INT4_ARRAY,
        JSONB_ARRAY,
        INT4_ARRAY,
        INT8_ARRAY,
        INT4
    ),
    job_leases_of_node(UUID_ARRAY, INT4_ARRAY, UUID),
    job_logs(UUID, INT4, INT8),
    job_list_in_transaction(INT8),
    job_lock_running(UUID_ARRAY, INT4_ARRAY),
    job_notify_queues(TEXT_ARRAY),
    job_promote_scheduled(TIMESTAMPTZ),
    job_prune(INT8, INT8, INT8, TIMESTAMPTZ, UUID),
    job_prune_count(INT8, INT8, TIMESTAMPTZ),
    job_json_texts(UUID_ARRAY),
    job_quarantine(
        UUID_ARRAY,
        TEXT_ARRAY,
        TIMESTAMPTZ,
        UUID_ARRAY,
        UUID_ARRAY,
        UUID_ARRAY
    ),
    job_replace(
        UUID,
        TEXT,
        JSONB,
        INT2,
        TIMESTAMPTZ,
        INT4,
        INT4,
        TEXT,
        TIMESTAMPTZ,
        JSONB
    ),
    job_rescue_expired(TIMESTAMPTZ, INT4),
    job_retry(UUID, TIMESTAMPTZ),
    job_retry_many(TEXT, TEXT, TIMESTAMPTZ),
    job_search(
        TEXT,
        TEXT,
        TEXT,
        UUID,
        TIMESTAMPTZ,
        TIMESTAMPTZ,
        INT8,
        TEXT,
        JSONB,
        INT8
    ),
    job_state_type(),
    job_stats_per_minute(INT8, TIMESTAMPTZ),
    job_snooze_many(UUID_ARRAY, INT4_ARRAY, INT8_ARRAY, TIMESTAMPTZ),
    job_unique_holder(TEXT, TIMESTAMPTZ, UUID),
    job_unreadable_scheduled(),
    job_vacuum_due(INT8),
    node_deregister(UUID),
    node_heartbeat(UUID, TEXT, TEXT_ARRAY, INT4, TIMESTAMPTZ),
    node_hold(UUID, TEXT, TEXT_ARRAY, INT4, TIMESTAMPTZ),
    node_let_go(UUID),
    node_list(),
    node_release_dead(INT8, TIMESTAMPTZ, BOOL, INT4, UUID),
    queue_groups_ready(TEXT, TEXT, INT4),
    queue_lock(TEXT, TIMESTAMPTZ),
    queue_mark_grouped(TEXT_ARRAY),
    queue_settings_all(),
    queue_stats(TIMESTAMPTZ),
    queue_update(TEXT, BOOL, BOOL, INT4, BOOL, INT4, BOOL, INT4, INT4, INT4),
    schema_name_keyword(TEXT),
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_renames_schema_and_channel() {
        let sql = bind(
            "SELECT pg_notify('hopper_wake', 'x') FROM hopper.jobs",
            "t1",
        );
        assert_eq!(sql, "SELECT pg_notify('t1_wake', 'x') FROM t1.jobs");
    }
}
