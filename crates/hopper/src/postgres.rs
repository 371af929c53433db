//! What only PostgreSQL offers (the `postgres` feature): the backend and its options, and
//! work inside the application's own transaction.
//!
//! - **Enqueue in your transaction**: [`Client::insert_in`], [`Client::enqueue_in`],
//!   [`Client::upsert_in`], [`Client::insert_many_in`] and [`Client::upsert_many_in`] take a
//!   tokio-postgres client or transaction; with the `sqlx` feature, `Client::insert_in_sqlx`
//!   and its siblings do the same on a sqlx connection or transaction. The job exists only
//!   if that transaction commits. They run the client's enqueue middleware inside a
//!   `hopper.enqueue` span, as [`Client::insert`] does (so the trace context of the
//!   OpenTelemetry middleware is stored). The same methods of [`PgBackend`]
//!   ([`PgBackend::insert_in`], `PgBackend::sqlx`) write the jobs as given: no middleware,
//!   no span.
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
//! jobs.insert_in(&tx, NewJob::new("send_email", serde_json::json!({"to": "ada@example.com"}))).await?;
//! tx.commit().await?; // the user and the job, or neither
//! # Ok(()) }
//! ```

use std::sync::Arc;

use hopper_core::{Backend, Error, InsertOutcome, JobArgs, JobId, NewJob, Result};
#[cfg(feature = "sqlx")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlx")))]
pub use hopper_postgres::SqlxJobs;
pub use hopper_postgres::{
    ClaimCursorConfig, ClaimStartMode, ConnectError, PgBackend, PgConnectOptions, PgOptions, Pooler,
};

use crate::{Client, JobContext, spans};

impl From<PgBackend> for Client {
    fn from(backend: PgBackend) -> Self {
        Client::new(Arc::new(backend))
    }
}

/// Enqueueing inside the caller's transaction, through the client's middleware.
impl Client {
    /// Runs the enqueue middleware on `jobs` inside their `hopper.enqueue` span, then
    /// `write` with the PostgreSQL backend and the jobs as the middleware left them.
    async fn in_transaction<T>(
        &self,
        jobs: &[NewJob],
        write: impl AsyncFnOnce(&PgBackend, &[NewJob]) -> Result<T>,
    ) -> Result<T> {
        let pg = postgres_of(self.backend(), "enqueueing inside a transaction")?;
        let work = async {
            let jobs = self.prepared(jobs).await?;
            write(pg, &jobs).await
        };
        spans::seam(self.enqueue_span(jobs), work, spans::uncounted).await
    }

    /// Enqueues typed `args` with default options on the caller's client or transaction
    /// (see [`Client::insert_in`]). Returns the job's id.
    pub async fn enqueue_in<A: JobArgs>(
        &self,
        client: &(impl tokio_postgres::GenericClient + Sync),
        args: &A,
    ) -> Result<JobId> {
        self.insert_in(client, NewJob::of(args)?).await
    }

    /// Inserts one job on the caller's client or transaction, after the client's enqueue
    /// middleware: the job commits or rolls back with the caller's own writes. Answers its
    /// id (the holder's, when its unique key was taken under the `ignore` policy). Fails
    /// with [`Error::Unsupported`] when the client's backend is not PostgreSQL.
    pub async fn insert_in(
        &self,
        client: &(impl tokio_postgres::GenericClient + Sync),
        job: NewJob,
    ) -> Result<JobId> {
        let id = job.id;
        let outcome = self.upsert_in(client, job).await?;
        Ok(outcome.id(id))
    }

    /// [`Client::insert_in`], saying what became of the job (see [`InsertOutcome`]).
    pub async fn upsert_in(
        &self,
        client: &(impl tokio_postgres::GenericClient + Sync),
        job: NewJob,
    ) -> Result<InsertOutcome> {
        self.in_transaction(std::slice::from_ref(&job), async |pg, jobs| {
            pg.upsert_in(client, only(jobs)?).await
        })
        .await
    }

    /// Inserts many jobs inside the caller's transaction, after the client's enqueue
    /// middleware (binary COPY, or `INSERT … ON CONFLICT` for jobs with groups or unique
    /// keys).
    pub async fn insert_many_in(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
        jobs: &[NewJob],
    ) -> Result<()> {
        self.upsert_many_in(tx, jobs).await.map(drop)
    }

    /// [`Client::insert_many_in`], saying what became of each job (in order).
    pub async fn upsert_many_in(
        &self,
        tx: &tokio_postgres::Transaction<'_>,
        jobs: &[NewJob],
    ) -> Result<Vec<InsertOutcome>> {
        self.in_transaction(jobs, async |pg, jobs| pg.upsert_many(tx, jobs).await)
            .await
    }

    /// [`Client::enqueue_in`] on a sqlx connection or transaction (`&mut *tx`).
    #[cfg(feature = "sqlx")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlx")))]
    pub async fn enqueue_in_sqlx<A: JobArgs>(
        &self,
        conn: &mut sqlx_postgres::PgConnection,
        args: &A,
    ) -> Result<JobId> {
        self.insert_in_sqlx(conn, NewJob::of(args)?).await
    }

    /// [`Client::insert_in`] on a sqlx connection or transaction (`&mut *tx`).
    #[cfg(feature = "sqlx")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlx")))]
    pub async fn insert_in_sqlx(
        &self,
        conn: &mut sqlx_postgres::PgConnection,
        job: NewJob,
    ) -> Result<JobId> {
        let id = job.id;
        let outcome = self.upsert_in_sqlx(conn, job).await?;
        Ok(outcome.id(id))
    }

    /// [`Client::upsert_in`] on a sqlx connection or transaction (`&mut *tx`).
    #[cfg(feature = "sqlx")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlx")))]
    pub async fn upsert_in_sqlx(
        &self,
        conn: &mut sqlx_postgres::PgConnection,
        job: NewJob,
    ) -> Result<InsertOutcome> {
        self.in_transaction(std::slice::from_ref(&job), async |pg, jobs| {
            pg.sqlx().upsert(conn, only(jobs)?).await
        })
        .await
    }

    /// [`Client::insert_many_in`] on a sqlx connection or transaction (`&mut *tx`): all
    /// or nothing, in a savepoint inside the caller's transaction.
    #[cfg(feature = "sqlx")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlx")))]
    pub async fn insert_many_in_sqlx(
        &self,
        conn: &mut sqlx_postgres::PgConnection,
        jobs: &[NewJob],
    ) -> Result<()> {
        self.upsert_many_in_sqlx(conn, jobs).await.map(drop)
    }

    /// [`Client::upsert_many_in`] on a sqlx connection or transaction (`&mut *tx`).
    #[cfg(feature = "sqlx")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlx")))]
    pub async fn upsert_many_in_sqlx(
        &self,
        conn: &mut sqlx_postgres::PgConnection,
        jobs: &[NewJob],
    ) -> Result<Vec<InsertOutcome>> {
        self.in_transaction(jobs, async |pg, jobs| {
            pg.sqlx().upsert_many(conn, jobs).await
        })
        .await
    }
}

/// The one job of a single enqueue, as the middleware left it (a middleware may not drop
/// it: the slice keeps its length).
fn only(jobs: &[NewJob]) -> Result<&NewJob> {
    jobs.first()
        .ok_or_else(|| Error::InvalidInput("no job to enqueue".to_owned()))
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
        let pg = postgres_of(self.backend(), "completing inside a transaction")?;
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
        let pg = postgres_of(self.backend(), "completing inside a transaction")?;
        pg.sqlx()
            .complete(conn, self.lease(), self.elapsed_ms())
            .await?;
        self.mark_completed_in_tx();
        Ok(())
    }
}

/// The PostgreSQL backend a client or runtime works on: they are written for any backend,
/// and only this one can do `what` inside the application's transaction.
fn postgres_of<'a>(backend: &'a Arc<dyn Backend>, what: &str) -> Result<&'a PgBackend> {
    backend.as_any().downcast_ref::<PgBackend>().ok_or_else(|| {
        Error::Unsupported(format!(
            "{what} needs the postgres backend, not {}",
            backend.name()
        ))
    })
}
