//! The SQL text of every query and migration, loaded from the `.sql` files beside this
//! crate and bound to the configured schema.
//!
//! The files name the schema `hopper` and the wake-up channel `hopper_wake`. Binding
//! replaces both with the configured schema's names, once, when the backend is built. The
//! schema name is checked ([`validate_schema`]) so the replacement cannot inject anything.

use hopper_core::{Error, Result};

/// Checks a schema name: a lowercase SQL identifier that needs no quoting.
pub fn validate_schema(schema: &str) -> Result<()> {
    let mut chars = schema.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_ok && rest_ok && schema.len() <= 50 {
        Ok(())
    } else {
        Err(Error::InvalidInput(format!(
            "schema name {schema:?} must be 1 to 50 characters of a-z, 0-9 and _, not starting with a digit"
        )))
    }
}

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
];

macro_rules! queries {
    ($($name:ident),* $(,)?) => {
        /// Every query, bound to one schema. One field per `.sql` file in `src/queries/`.
        #[derive(Debug)]
        #[allow(missing_docs)]
        pub struct Queries {
            $(pub $name: String,)*
        }

        impl Queries {
            /// Loads every query for `schema`.
            pub fn new(schema: &str) -> Self {
                Queries {
                    $($name: bind(include_str!(concat!("queries/", stringify!($name), ".sql")), schema),)*
                }
            }
        }
    };
}

queries!(
    cron_advance,
    cron_list,
    cron_register,
    job_cancel,
    job_claim,
    job_claim_fair,
    job_claim_flush,
    job_claim_limited,
    job_clear,
    job_complete_many,
    job_delete,
    job_extend_many,
    job_fail_many,
    job_get,
    job_insert,
    job_insert_full,
    job_insert_many_copy,
    job_insert_many_full,
    job_list,
    job_notify_queues,
    job_promote_scheduled,
    job_prune,
    job_prune_count,
    job_replace,
    job_rescue_expired,
    job_retry,
    job_retry_many,
    job_search,
    job_state_type,
    job_stats_per_minute,
    job_snooze_many,
    job_unique_holder,
    job_vacuum_due,
    node_deregister,
    node_heartbeat,
    node_release_dead,
    queue_groups_ready,
    queue_lock,
    queue_mark_grouped,
    queue_settings_all,
    queue_stats,
    queue_update,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_plain_identifiers() {
        assert!(validate_schema("hopper").is_ok());
        assert!(validate_schema("t_42").is_ok());
        for bad in ["", "1abc", "Hopper", "a;b", "a.b", "a\"b", &"x".repeat(51)] {
            assert!(validate_schema(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn binding_renames_schema_and_channel() {
        let sql = bind(
            "SELECT pg_notify('hopper_wake', 'x') FROM hopper.jobs",
            "t1",
        );
        assert_eq!(sql, "SELECT pg_notify('t1_wake', 'x') FROM t1.jobs");
    }
}
