//! Applying migrations: numbered, embedded, in hopper's own schema, safe to run twice and
//! from several processes at once, and refusing a database newer than this build.

use hopper_core::{AppliedMigration, Error, Result, policy};
use tokio_postgres::Client;
use tokio_postgres::types::Type;

use crate::error::map_pg;
use crate::sql::{MIGRATIONS, bind};
use crate::statement::{Pooler, Query};

/// Applies every migration `schema` lacks, in one transaction, and returns them.
///
/// A transaction-scoped advisory lock keyed on the schema name serialises concurrent
/// migrators: the second waits, then finds nothing left to do. Nothing outlives the
/// transaction, so this runs as well behind a transaction pooler.
pub async fn migrate(
    client: &mut Client,
    schema: &str,
    pooler: Pooler,
) -> Result<Vec<AppliedMigration>> {
    let lock = Query::new(
        "SELECT pg_advisory_xact_lock(hashtext('hopper migrate ' || $1::text))",
        &[Type::TEXT],
    );
    let applied = applied_version(schema);
    let record = Query::new(
        format!("INSERT INTO {schema}.migrations (version, name) VALUES ($1, $2)"),
        &[Type::INT4, Type::TEXT],
    );
    let tx = client.transaction().await.map_err(map_pg)?;
    pooler
        .text(&lock)
        .execute(&tx, &[&schema])
        .await
        .map_err(map_pg)?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         CREATE TABLE IF NOT EXISTS {schema}.migrations (
             version    integer PRIMARY KEY,
             name       text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now()
         );"
    ))
    .await
    .map_err(map_pg)?;
    let applied: Option<i32> = pooler
        .text(&applied)
        .query_one(&tx, &[])
        .await
        .map_err(map_pg)?
        .get(0);
    let applied = applied.unwrap_or(0);
    refuse_newer(schema, applied)?;
    let mut done = Vec::new();
    for (version, name, sql) in MIGRATIONS.iter().filter(|m| m.0 > applied) {
        tracing::info!(schema, version, name, "applying migration");
        tx.batch_execute(&bind(sql, schema)).await.map_err(|e| {
            Error::Schema(format!(
                "migration {version:04}_{name} failed: {}",
                map_pg(e)
            ))
        })?;
        pooler
            .text(&record)
            .execute(&tx, &[version, name])
            .await
            .map_err(map_pg)?;
        done.push(AppliedMigration {
            version: i64::from(*version),
            name: (*name).to_owned(),
        });
    }
    tx.commit().await.map_err(map_pg)?;
    Ok(done)
}

/// Refuses, changing nothing, a schema migrated by a newer build or never migrated (its
/// `migrations` table missing: an error saying to run `hopper migrate`).
pub async fn check(client: &Client, schema: &str, pooler: Pooler) -> Result<()> {
    let applied: Option<i32> = pooler
        .text(&applied_version(schema))
        .query_one(client, &[])
        .await
        .map_err(map_pg)?
        .get(0);
    refuse_newer(schema, applied.unwrap_or(0))
}

/// The last migration applied to `schema`.
fn applied_version(schema: &str) -> Query {
    Query::new(format!("SELECT max(version) FROM {schema}.migrations"), &[])
}

/// [`policy::refuse_newer_schema`] against the last migration this build knows.
fn refuse_newer(schema: &str, applied: i32) -> Result<()> {
    let known = MIGRATIONS.last().map_or(0, |m| m.0);
    policy::refuse_newer_schema(&format!("schema {schema}"), applied.into(), known.into())
}
