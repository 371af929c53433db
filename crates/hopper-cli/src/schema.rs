//! The schema check of the commands that run jobs without migrating (`hopper worker`,
//! `hopper bench`): a schema newer than this build ends them at once with the message
//! `hopper migrate`, `hopper demo` and `hopper serve` give (their migration refuses it,
//! [`hopper::core::policy::refuse_newer_schema`]), on both backends, since a newer hopper may claim and
//! finish jobs by rules this build does not know. A schema never migrated ends them at
//! once too, saying to run `hopper migrate`.
//!
//! The one-shot admin commands (`enqueue`, `stats`, `jobs`, `queues`, `cron`, `nodes`) are
//! not checked: each reads or changes a few rows through statements the database checks
//! against the schema it has, so an operator can still look at and act on jobs while
//! workers are being upgraded (docs/reliability.md).

use std::sync::Arc;

use hopper::backend::Backend;

use crate::outage;

/// Refuses a schema newer than this build (or never migrated), retrying a database that
/// is away as the opening of the database does ([`Backend::schema_check`]).
pub async fn refuse_newer(backend: &Arc<dyn Backend>) -> anyhow::Result<()> {
    outage::retry_if("checking the schema", outage::is_transient, || async {
        Ok(backend.schema_check().await?)
    })
    .await
}
