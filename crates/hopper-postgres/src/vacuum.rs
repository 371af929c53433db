//! The job table's own vacuum (`job_vacuum_due.sql` says when and why).

use std::time::Duration;

use hopper_core::{Error, Result};

use crate::PgBackend;
use crate::error::map_pg;
use crate::hot::millis;

impl PgBackend {
    /// Vacuums and analyzes the job table if it is due and no other node is at it.
    pub(crate) async fn jobs_vacuum(&self, min_interval: Duration) -> Result<bool> {
        let client = self.client().await?;
        let due: bool = self
            .text(&self.inner.queries.job_vacuum_due)
            .query_one(&**client, &[&millis(min_interval)])
            .await
            .map_err(map_pg)?
            .try_get(0)
            .map_err(Error::database)?;
        if !due {
            return Ok(false);
        }
        if self.inner.pooler.unnamed() {
            return self.vacuum_skip_locked(&client).await;
        }
        // A session lock: VACUUM cannot run inside a transaction, so the election holds
        // for this connection until the unlock below.
        let key = format!("hopper vacuum {}", self.inner.schema);
        let elected: bool = client
            .query_one("SELECT pg_try_advisory_lock(hashtext($1))", &[&key])
            .await
            .map_err(map_pg)?
            .try_get(0)
            .map_err(Error::database)?;
        if !elected {
            return Ok(false);
        }
        let vacuumed = client
            .batch_execute(&format!("VACUUM (ANALYZE) {}.jobs", self.inner.schema))
            .await
            .map_err(map_pg);
        let unlocked = client
            .execute("SELECT pg_advisory_unlock(hashtext($1))", &[&key])
            .await
            .map_err(map_pg);
        vacuumed?;
        unlocked?;
        Ok(true)
    }

    /// The vacuum behind a transaction pooler, where a session lock would stay with
    /// whichever server session took it: no election, but `SKIP_LOCKED`, so a node that
    /// finds the table being vacuumed (by another node or autovacuum) skips it rather than
    /// waiting. True even when it skipped: the table is being vacuumed.
    async fn vacuum_skip_locked(&self, client: &tokio_postgres::Client) -> Result<bool> {
        let sql = format!("VACUUM (ANALYZE, SKIP_LOCKED) {}.jobs", self.inner.schema);
        client.batch_execute(&sql).await.map_err(map_pg)?;
        Ok(true)
    }
}
