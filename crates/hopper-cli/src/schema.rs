//! The schema check of the commands that run jobs without migrating (`hopper worker`,
//! `hopper bench`): a schema newer than this build ends them at once with the message
//! `hopper migrate`, `hopper demo` and `hopper serve` give (their migration refuses it,
//! [`hopper::core::policy::refuse_newer_schema`]), since a newer hopper may claim and
//! finish jobs by rules this build does not know. A schema never migrated ends them at
//! once too, saying to run `hopper migrate`.
//!
//! The one-shot admin commands (`enqueue`, `stats`, `jobs`, `queues`, `cron`, `nodes`) are
//! not checked: each reads or changes a few rows through statements the database checks
//! against the schema it has, so an operator can still look at and act on jobs while
//! workers are being upgraded (docs/reliability.md).

use std::sync::Arc;

use hopper::PgBackend;
use hopper::backend::Backend;
use hopper_postgres::map_pg;

use crate::outage;

/// Refuses a schema newer than this build (or never migrated), retrying a database that
/// is away as the opening of the database does. A backend other than PostgreSQL passes:
/// a `hopper serve` checks its own database when it starts, and SQLite's version is read
/// only by its migration.
pub async fn refuse_newer(backend: &Arc<dyn Backend>) -> anyhow::Result<()> {
    let Some(pg) = backend.as_any().downcast_ref::<PgBackend>() else {
        return Ok(());
    };
    outage::retry_if("checking the schema", outage::is_transient, || async {
        Ok(check(pg).await?)
    })
    .await
}

/// The version `pg`'s schema is at against the last one this build knows.
async fn check(pg: &PgBackend) -> hopper::Result<()> {
    let schema = pg.schema();
    let conn = pg.pool().get().await.map_err(hopper_postgres::map_pool)?;
    // Unnamed: runs as well behind a transaction pooler.
    let sql = format!("SELECT max(version) FROM {schema}.migrations");
    let row = conn.query_typed_one(&sql, &[]).await.map_err(map_pg)?;
    let applied: Option<i32> = row.try_get(0).map_err(map_pg)?;
    let known = hopper_postgres::sql::MIGRATIONS.last().map_or(0, |m| m.0);
    hopper::core::policy::refuse_newer_schema(
        &format!("schema {schema}"),
        applied.unwrap_or(0).into(),
        known.into(),
    )
}
