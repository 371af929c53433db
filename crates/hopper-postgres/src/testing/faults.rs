//! Real database failures for tests: the log stores of a [`TestDatabase`] fail with a
//! SQLSTATE of the test's choice (`fail_log_stores.sql`), so that what stores job logs
//! (the runtime, `hopper serve`) is tested against the errors PostgreSQL really sends; and
//! a wait for statements to reach a lock the test holds.

use std::time::{Duration, Instant};

use hopper_core::{Error, Result};

use super::TestDatabase;
use crate::map_pg;

/// The trigger and its counters, installed in the test schema.
const FAIL_LOG_STORES: &str = include_str!("fail_log_stores.sql");

impl TestDatabase {
    /// Has the first `failures` statements that store job log lines in this schema fail
    /// with SQLSTATE `sqlstate` (for example `40001`, a serialization failure: transient;
    /// `P0001`, a raised exception: permanent); the ones after succeed. `u64::MAX` fails
    /// them all, 0 only counts them ([`TestDatabase::log_store_attempts`]). Once per
    /// database.
    pub async fn fail_log_stores(&self, failures: u64, sqlstate: &str) -> Result<()> {
        let client = self.sql().await?;
        client
            .batch_execute(FAIL_LOG_STORES)
            .await
            .map_err(map_pg)?;
        let failures = i64::try_from(failures).unwrap_or(i64::MAX);
        client
            .execute(
                "INSERT INTO log_store_faults (failures, sqlstate) VALUES ($1, $2)",
                &[&failures, &sqlstate],
            )
            .await
            .map_err(map_pg)?;
        Ok(())
    }

    /// The statements that tried to store job log lines since
    /// [`TestDatabase::fail_log_stores`], failed or not.
    pub async fn log_store_attempts(&self) -> Result<i64> {
        let row = self
            .sql()
            .await?
            .query_one(
                "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM log_store_attempts",
                &[],
            )
            .await
            .map_err(map_pg)?;
        Ok(row.get(0))
    }

    /// Waits until at least `sessions` sessions of this database wait for a lock
    /// (`pg_stat_activity`), for at most `limit`: the sign that the statements a test set
    /// off have reached a row or table it holds in a transaction of its own. Read on a
    /// connection of its own (inside the holder's transaction the view would not change),
    /// every 5 ms. [`Error::Timeout`] when they do not within `limit`.
    pub async fn wait_for_lock_waits(&self, sessions: i64, limit: Duration) -> Result<()> {
        let client = self.sql().await?;
        let started = Instant::now();
        loop {
            let row = client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE datname = current_database() AND wait_event_type = 'Lock'",
                    &[],
                )
                .await
                .map_err(map_pg)?;
            let waiting: i64 = row.get(0);
            if waiting >= sessions {
                return Ok(());
            }
            if started.elapsed() > limit {
                return Err(Error::Timeout(format!(
                    "{waiting} sessions wait for a lock, not {sessions}, after {limit:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Holds the row of job `id` as an application's open transaction would
    /// (`SELECT … FOR UPDATE`), until [`RowHold::release`] commits it (dropped, the
    /// connection closes and the hold ends with it).
    pub async fn hold_job(&self, id: hopper_core::JobId) -> Result<RowHold> {
        let client = self.sql().await?;
        client
            .batch_execute(&format!(
                "BEGIN; SELECT 1 FROM jobs WHERE id = '{id}' FOR UPDATE"
            ))
            .await
            .map_err(map_pg)?;
        Ok(RowHold { client })
    }

    /// A connection of the test's own, with this schema first in its `search_path`.
    async fn sql(&self) -> Result<tokio_postgres::Client> {
        let (client, conn) = crate::PgConnectOptions::parse(self.url())?
            .connect_raw()
            .await?;
        tokio::spawn(conn);
        let schema = self.schema().replace('"', "\"\"");
        client
            .batch_execute(&format!("SET search_path TO \"{schema}\""))
            .await
            .map_err(map_pg)?;
        Ok(client)
    }
}

/// A row held by an open transaction of a test ([`TestDatabase::hold_job`]).
pub struct RowHold {
    client: tokio_postgres::Client,
}

impl RowHold {
    /// Ends the hold: the transaction commits.
    pub async fn release(&self) -> Result<()> {
        self.client.batch_execute("COMMIT").await.map_err(map_pg)
    }
}
