//! Applying migrations: numbered, embedded, safe to run twice and from several processes
//! at once, and refusing a database newer than this build.

use hopper_core::{AppliedMigration, Error, Result, policy};
use rusqlite::{Connection, Transaction, named_params};

use crate::error::map_sqlite;
use crate::sql::{MIGRATIONS, Queries, bind};

/// Applies every migration the database lacks, inside `tx`, and returns them.
///
/// `tx` is a `BEGIN IMMEDIATE` transaction: it holds the file's write lock from its first
/// statement, so a second migrator (another process) waits for it, then finds nothing left
/// to do. SQLite's DDL is transactional, so a failed migration leaves nothing half done.
pub fn migrate(
    tx: &Transaction<'_>,
    queries: &Queries,
    prefix: &str,
    now: i64,
) -> Result<Vec<AppliedMigration>> {
    tx.execute_batch(&queries.migrate[0]).map_err(map_sqlite)?;
    let applied = applied_version(tx, queries)?;
    refuse_newer(prefix, applied)?;
    let mut done = Vec::new();
    for (version, name, sql) in MIGRATIONS.iter().filter(|m| m.0 > applied) {
        tracing::info!(prefix, version, name, "applying migration");
        tx.execute_batch(&bind(sql, prefix)).map_err(|e| {
            Error::Schema(format!(
                "migration {version:04}_{name} failed: {}",
                map_sqlite(e)
            ))
        })?;
        tx.execute(
            &queries.migrate[2],
            named_params! { ":version": version, ":name": name, ":now": now },
        )
        .map_err(map_sqlite)?;
        done.push(AppliedMigration {
            version: *version,
            name: (*name).to_owned(),
        });
    }
    Ok(done)
}

/// Refuses, changing nothing, tables migrated by a newer build or never migrated (the
/// migrations table missing: an error saying to run `hopper migrate`).
pub fn check(conn: &Connection, queries: &Queries, prefix: &str) -> Result<()> {
    refuse_newer(prefix, applied_version(conn, queries)?)
}

/// The last migration applied.
fn applied_version(conn: &Connection, queries: &Queries) -> Result<i64> {
    conn.query_row(&queries.migrate[1], [], |row| row.get(0))
        .map_err(map_sqlite)
}

/// [`policy::refuse_newer_schema`] against the last migration this build knows.
fn refuse_newer(prefix: &str, applied: i64) -> Result<()> {
    let known = MIGRATIONS.last().map_or(0, |m| m.0);
    policy::refuse_newer_schema(&format!("tables {prefix}_*"), applied, known)
}
