//! The two database reads the bench makes itself: how many bench jobs are unfinished, and
//! `VACUUM ANALYZE` between workloads (as `bench-peers/harness.py` does for every system).

use anyhow::Context;
use hopper::{Client, PgBackend, Pooler};
use hopper_postgres::{map_pg, map_pool};
use tokio_postgres::types::Type;

use super::QUEUE;

/// The type of the counts' one parameter (the queue), for unnamed statements.
const TEXT: Type = Type::TEXT;

/// `unfinished.sql`, written against the schema `hopper`.
const UNFINISHED_SQL: &str = include_str!("unfinished.sql");

/// `any_unfinished.sql`, written against the schema `hopper`.
const ANY_UNFINISHED_SQL: &str = include_str!("any_unfinished.sql");

fn postgres(client: &Client) -> Option<&PgBackend> {
    client.backend().as_any().downcast_ref::<PgBackend>()
}

/// `sql` for the backend's schema (a checked plain identifier, see `PgOptions::schema`).
fn bind(sql: &str, pg: &PgBackend) -> String {
    sql.replace("hopper.", &format!("{}.", pg.schema()))
}

/// Bench jobs scheduled, available or running, whoever enqueued them.
pub async fn unfinished(client: &Client) -> anyhow::Result<u64> {
    let Some(pg) = postgres(client) else {
        // Another backend: its stats, which may cost a table scan.
        let stats = client.stats().await?;
        let queue = stats.iter().find(|s| s.queue == QUEUE);
        let n = queue.map_or(0, |s| s.scheduled + s.available + s.running);
        return Ok(u64::try_from(n).unwrap_or(0));
    };
    let n: i64 = query_one(pg, UNFINISHED_SQL)
        .await
        .context("counting unfinished jobs")?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Whether any bench job is scheduled, available or running: cheap enough to poll often.
pub async fn any_unfinished(client: &Client) -> anyhow::Result<bool> {
    let Some(pg) = postgres(client) else {
        return Ok(unfinished(client).await? > 0);
    };
    query_one(pg, ANY_UNFINISHED_SQL)
        .await
        .context("looking for unfinished jobs")
}

/// The one value of `sql` (written against the schema `hopper`) for the bench queue, with
/// the database's errors as hopper's (transient or not; a missing table says to migrate).
async fn query_one<T>(pg: &PgBackend, sql: &str) -> hopper::Result<T>
where
    T: for<'a> tokio_postgres::types::FromSql<'a>,
{
    let conn = pg.pool().get().await.map_err(map_pool)?;
    let sql = bind(sql, pg);
    // Prepared once per connection, or unnamed behind a transaction pooler.
    let row = match pg.pooler() {
        Pooler::None => {
            let statement = conn.prepare_cached(&sql).await.map_err(map_pg)?;
            conn.query_one(&statement, &[&QUEUE]).await
        }
        Pooler::Transaction => conn.query_typed_one(&sql, &[(&QUEUE, TEXT)]).await,
    }
    .map_err(map_pg)?;
    row.try_get(0).map_err(map_pg)
}

/// `VACUUM ANALYZE` of the jobs table (PostgreSQL only; elsewhere nothing).
pub async fn vacuum(client: &Client) -> anyhow::Result<()> {
    if let Some(pg) = postgres(client) {
        let conn = pg.pool().get().await.context("vacuum")?;
        conn.batch_execute(&bind("VACUUM ANALYZE hopper.jobs", pg))
            .await
            .context("vacuum analyze of the jobs table")?;
    }
    Ok(())
}
