//! What only PostgreSQL offers (the `postgres` feature): the backend and its options, and
//! work inside the application's own transaction.
//!
//! - **Enqueue in your transaction**: [`PgBackend::enqueue_in`], [`PgBackend::insert_in`]
//!   and [`PgBackend::insert_many_in`] take a tokio-postgres client or transaction; with
//!   the `sqlx` feature, `PgBackend::sqlx` does the same on a sqlx connection or
//!   transaction. The job exists only if that transaction commits.
//! - **Complete in the handler's transaction**: [`JobContext::complete_in`] (and
//!   `JobContext::complete_in_sqlx`, the `sqlx` feature) complete the job with the
//!   handler's own writes: both commit or neither does, and a stale lease completes
//!   nothing.
//!
//! The backend's types are re-exported at the crate root too ([`crate::PgBackend`], …).
//!
//! ```no_run
//! # async fn run(conn: &mut tokio_postgres::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use hopper::postgres::{PgBackend, PgOptions};
//! use hopper::{Client, NewJob};
//!
//! let pg = PgBackend::connect("postgres://postgres@127.0.0.1/postgres", PgOptions::default()).await?;
//! let jobs = Client::from(pg.clone()); // enqueue, administer: the same as on any backend
//! jobs.migrate().await?;
//!
//! let tx = conn.transaction().await?;
//! tx.execute("INSERT INTO users (name) VALUES ($1)", &[&"ada"]).await?;
//! pg.insert_in(&tx, &NewJob::new("send_email", serde_json::json!({"to": "ada@example.com"}))).await?;
//! tx.commit().await?; // the user and the job, or neither
//! # Ok(()) }
//! ```

use std::sync::Arc;

use hopper_core::{Backend, Error, Result};
#[cfg(feature = "sqlx")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlx")))]
pub use hopper_postgres::SqlxJobs;
pub use hopper_postgres::{
    ClaimCursorConfig, ClaimStartMode, ConnectError, PgBackend, PgConnectOptions, PgOptions, Pooler,
};

use crate::{Client, JobContext};

impl From<PgBackend> for Client {
    fn from(backend: PgBackend) -> Self {
        Client::new(Arc::new(backend))
    }
}

impl JobContext {
    /// Completes the job inside `client`'s transaction, so the job's completion and the
    /// handler's writes commit or roll back together. Call it before committing, then
    /// return `Ok(())`. Fails with [`Error::LeaseLost`] (and completes nothing) if this
    /// attempt's lease is no longer current; with [`Error::Unsupported`] when the runtime
    /// does not run on PostgreSQL.
    pub async fn complete_in(
        &self,
        client: &(impl tokio_postgres::GenericClient + Sync),
    ) -> Result<()> {
        let pg = postgres_of(self.backend())?;
        pg.complete_in(client, self.lease(), self.elapsed_ms())
            .await?;
        self.mark_completed_in_tx();
        Ok(())
    }

    /// [`JobContext::complete_in`] on a sqlx connection: pass `&mut *tx` for a
    /// `sqlx::Transaction<'_, sqlx::Postgres>`.
    #[cfg(feature = "sqlx")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlx")))]
    pub async fn complete_in_sqlx(&self, conn: &mut sqlx_postgres::PgConnection) -> Result<()> {
        let pg = postgres_of(self.backend())?;
        pg.sqlx()
            .complete(conn, self.lease(), self.elapsed_ms())
            .await?;
        self.mark_completed_in_tx();
        Ok(())
    }
}

/// The PostgreSQL backend a runtime runs on: the runtime is written for any backend, and
/// only this one can complete a job in the handler's transaction.
fn postgres_of(backend: &Arc<dyn Backend>) -> Result<&PgBackend> {
    backend.as_any().downcast_ref::<PgBackend>().ok_or_else(|| {
        Error::Unsupported(format!(
            "completing inside a transaction needs the postgres backend, not {}",
            backend.name()
        ))
    })
}
