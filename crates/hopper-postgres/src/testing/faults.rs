//! Real database failures for tests: the log stores of a [`TestDatabase`] fail with a
//! SQLSTATE of the test's choice (`fail_log_stores.sql`), so that what stores job logs
//! (the runtime, `hopper serve`) is tested against the errors PostgreSQL really sends.

use hopper_core::Result;

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
