//! The SQL text of every query and migration, loaded from the `.sql` files beside this
//! crate and bound to the configured table prefix.
//!
//! The files name every table `hopper_…`. SQLite has no schemas inside one database, so
//! the prefix plays the part of PostgreSQL's schema: binding replaces `hopper_` with the
//! configured prefix and `_`, once, when the backend is built. The prefix is checked
//! ([`hopper_core::policy::validate_sql_name`]) so the replacement cannot inject anything.
//!
//! A file holds one statement, or several separated by a `;` at the end of a line (for
//! the few methods that need two statements in one transaction); each statement is
//! prepared on its own.

/// Rewrites SQL written for the `hopper_` prefix for `prefix`.
pub fn bind(sql: &str, prefix: &str) -> String {
    if prefix == "hopper" {
        sql.to_owned()
    } else {
        sql.replace("hopper_", &format!("{prefix}_"))
    }
}

/// Splits a file into its statements: each ends with a `;` at the end of a line (outside
/// `--` comments), or at the end of the file. Pieces holding only comments are dropped.
pub fn statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut has_code = false;
    for line in sql.lines() {
        current.push_str(line);
        current.push('\n');
        let code = line.split("--").next().unwrap_or_default().trim();
        has_code |= !code.is_empty();
        if code.ends_with(';') {
            if has_code {
                out.push(std::mem::take(&mut current));
            }
            current.clear();
            has_code = false;
        }
    }
    if has_code {
        out.push(current);
    }
    out
}

/// The migrations, in order: (version, name, SQL).
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
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
        "node_liveness",
        include_str!("../migrations/0003_node_liveness.sql"),
    ),
    (
        4,
        "job_meta",
        include_str!("../migrations/0004_job_meta.sql"),
    ),
    (
        5,
        "job_logs",
        include_str!("../migrations/0005_job_logs.sql"),
    ),
    (
        6,
        "unique_window_end",
        include_str!("../migrations/0006_unique_window_end.sql"),
    ),
];

macro_rules! queries {
    ($($name:ident: $count:literal),* $(,)?) => {
        /// Every query, bound to one prefix. One field per `.sql` file in `src/queries/`,
        /// holding that file's statements in order.
        #[derive(Debug)]
        #[allow(missing_docs)]
        pub struct Queries {
            $(pub $name: Vec<String>,)*
        }

        impl Queries {
            /// Loads every query for `prefix`.
            pub fn new(prefix: &str) -> Self {
                Queries {
                    $($name: statements(&bind(
                        include_str!(concat!("queries/", stringify!($name), ".sql")),
                        prefix,
                    )),)*
                }
            }

            /// Every file's name, its statements, and how many statements the code expects.
            #[cfg(test)]
            pub fn all(&self) -> Vec<(&'static str, &[String], usize)> {
                vec![$((stringify!($name), &self.$name[..], $count),)*]
            }
        }
    };
}

queries!(
    cron_advance: 1,
    cron_list: 1,
    cron_register: 1,
    job_attempts_of_node: 1,
    job_cancel: 1,
    job_claim: 1,
    job_claim_controlled: 7,
    job_clear: 1,
    job_complete_many: 1,
    job_delete: 1,
    job_extend_many: 1,
    job_fail_many: 1,
    job_get: 1,
    job_insert: 1,
    job_leases_of_node: 1,
    job_log_append: 1,
    job_logs: 1,
    job_promote_scheduled: 2,
    job_prune: 2,
    job_quarantine: 2,
    job_replace: 1,
    job_rescue_expired: 1,
    job_retry: 1,
    job_retry_many: 1,
    job_search: 1,
    job_snooze_many: 1,
    job_stats_per_minute: 1,
    job_unique_holder: 1,
    job_unreadable_scheduled: 1,
    migrate: 3,
    node_deregister: 1,
    node_heartbeat: 1,
    node_let_go: 2,
    node_list: 1,
    node_lock_paths: 1,
    node_release_dead: 2,
    queue_list: 1,
    queue_mark_grouped: 2,
    queue_stats: 1,
    queue_update: 1,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binding_renames_tables() {
        assert_eq!(
            bind("SELECT 1 FROM hopper_jobs JOIN hopper_nodes", "t1"),
            "SELECT 1 FROM t1_jobs JOIN t1_nodes"
        );
    }

    #[test]
    fn files_split_into_their_statements() {
        let parts = statements("-- head\nSELECT 1;\n-- between; not an end\nSELECT 2\n");
        assert_eq!(parts.len(), 2);
        assert!(parts[0].contains("SELECT 1;"));
        assert!(parts[1].contains("SELECT 2"));
        let queries = Queries::new("hopper");
        for (name, statements, expected) in queries.all() {
            assert_eq!(statements.len(), expected, "{name}.sql");
        }
    }

    #[test]
    fn every_statement_prepares_against_the_schema() -> rusqlite::Result<()> {
        let conn = rusqlite::Connection::open_in_memory()?;
        crate::functions::register(&conn)?;
        for (_, _, sql) in MIGRATIONS {
            conn.execute_batch(sql)?;
        }
        for prefix in ["hopper", "other"] {
            if prefix != "hopper" {
                for (_, _, sql) in MIGRATIONS {
                    conn.execute_batch(&bind(sql, prefix))?;
                }
            }
            let queries = Queries::new(prefix);
            conn.execute_batch(&queries.migrate[0])?;
            for (name, statements, _) in queries.all() {
                for sql in statements {
                    if let Err(e) = conn.prepare(sql) {
                        panic!("{name}.sql ({prefix}) does not prepare: {e}");
                    }
                }
            }
        }
        Ok(())
    }

    /// The plans the comments in the `.sql` files promise: claims walk the partial claim
    /// index without sorting, outcomes probe the primary key.
    #[test]
    fn hot_statements_use_their_indexes() -> rusqlite::Result<()> {
        let conn = rusqlite::Connection::open_in_memory()?;
        crate::functions::register(&conn)?;
        for (_, _, sql) in MIGRATIONS {
            conn.execute_batch(sql)?;
        }
        let queries = Queries::new("hopper");
        let plan = |sql: &str| -> rusqlite::Result<String> {
            let mut statement = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
            // Parameters stay unbound (NULL): the plan does not depend on their values.
            let mut rows = statement.raw_query();
            let mut details = Vec::new();
            while let Some(row) = rows.next()? {
                details.push(row.get::<_, String>(3)?);
            }
            Ok(details.join("\n"))
        };
        let claim = plan(&queries.job_claim[0])?;
        assert!(
            claim.contains("INDEX hopper_jobs_claim_idx (queue=?)"),
            "{claim}"
        );
        assert!(!claim.contains("TEMP B-TREE"), "{claim}");
        let promote = plan(&queries.job_promote_scheduled[0])?;
        assert!(promote.contains("hopper_jobs_scheduled_idx"), "{promote}");
        let rescue = plan(&queries.job_rescue_expired[0])?;
        assert!(rescue.contains("hopper_jobs_running_idx"), "{rescue}");
        for sql in [
            &queries.job_complete_many[0],
            &queries.job_fail_many[0],
            &queries.job_snooze_many[0],
            &queries.job_extend_many[0],
        ] {
            let outcome = plan(sql)?;
            assert!(
                outcome.contains("sqlite_autoindex_hopper_jobs_1 (id=?)"),
                "{outcome}"
            );
        }
        Ok(())
    }
}
