//! The client: enqueue jobs and administer them. It never runs jobs, so it can live in a
//! web process that only produces work.

use std::borrow::Cow;
use std::sync::Arc;

use hopper_core::backend::{JobCancelParams, JobClearParams, JobGetParams, JobRetryParams};
use hopper_core::{
    AppliedMigration, Backend, Error, InsertOutcome, JobArgs, JobId, JobListParams, JobRecord,
    NewJob, NodeListParams, NodePage, QueueStats, Result,
};
#[cfg(feature = "postgres")]
use hopper_postgres::{PgBackend, PgOptions};

use crate::metrics;
use crate::middleware::{Chain, Middleware};
use crate::spans;

/// Enqueues and administers jobs over any [`Backend`].
#[derive(Debug, Clone)]
pub struct Client {
    backend: Arc<dyn Backend>,
    middleware: Chain,
}

/// The options of [`connect`], one set per backend: the URL picks the backend, and only
/// that backend's options are used. Built with `ConnectOptions::default()` and the
/// `with_*` methods; `#[non_exhaustive]`, so a new backend is not a breaking change.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct ConnectOptions {
    /// For a PostgreSQL URL (`postgres` feature).
    #[cfg(feature = "postgres")]
    pub postgres: PgOptions,
    /// For a `sqlite:` URL (`sqlite` feature): table prefix, readers, clock, ….
    #[cfg(feature = "sqlite")]
    pub sqlite: hopper_sqlite::SqliteOptions,
    /// For a `tcp://` URL (`remote` feature): the base the URL's own parameters go on top
    /// of (see [`RemoteOptions::with_url`](crate::RemoteOptions::with_url)); its endpoint
    /// is the URL's.
    #[cfg(feature = "remote")]
    pub remote: crate::remote::RemoteOptions,
}

impl ConnectOptions {
    /// With `postgres` for a PostgreSQL URL.
    #[cfg(feature = "postgres")]
    pub fn with_postgres(self, postgres: PgOptions) -> Self {
        ConnectOptions { postgres, ..self }
    }

    /// With `sqlite` for a `sqlite:` URL.
    #[cfg(feature = "sqlite")]
    pub fn with_sqlite(self, sqlite: hopper_sqlite::SqliteOptions) -> Self {
        ConnectOptions { sqlite, ..self }
    }

    /// With `remote` for a `tcp://` URL.
    #[cfg(feature = "remote")]
    pub fn with_remote(self, remote: crate::remote::RemoteOptions) -> Self {
        ConnectOptions { remote, ..self }
    }
}

/// Opens the backend named by `url`, with its options from `options`:
///
/// - `postgres://…` or `postgresql://…`, or libpq's `key=value` form (`host=a,b
///   dbname=app sslmode=verify-full`) (`postgres` feature): PostgreSQL, with
///   `options.postgres`; TLS, several hosts and `target_session_attrs` as libpq reads them
///   (see [`hopper_postgres::PgConnectOptions`]);
/// - `sqlite://path/to/file.db`, `sqlite:///absolute/path.db`, `sqlite:path.db` or
///   `sqlite::memory:` (`sqlite` feature): SQLite
///   ([`SqliteBackend`](hopper_sqlite::SqliteBackend)), no server needed, with
///   `options.sqlite`;
/// - `tcp://host:port?token=…` (`remote` feature): a `hopper serve` server, with
///   `options.remote` under the URL's parameters.
///
/// A URL whose feature is not compiled in is an [`Error::Unsupported`] naming it.
#[cfg_attr(
    not(all(feature = "postgres", feature = "sqlite", feature = "remote")),
    allow(unused_variables, reason = "the options of the backends compiled out")
)]
pub async fn connect(url: &str, options: ConnectOptions) -> Result<Arc<dyn Backend>> {
    #[cfg(feature = "postgres")]
    if is_postgres(url) {
        return Ok(Arc::new(PgBackend::connect(url, options.postgres).await?));
    }
    #[cfg(feature = "sqlite")]
    if url.starts_with("sqlite:") {
        return Ok(Arc::new(
            hopper_sqlite::SqliteBackend::connect(url, options.sqlite).await?,
        ));
    }
    #[cfg(feature = "remote")]
    if url.starts_with("tcp://") {
        // A `hopper serve` server: `tcp://host:port?token=…` (see `crate::remote`).
        let remote = options.remote.with_url(url)?;
        return Ok(Arc::new(
            crate::remote::RemoteBackend::connect(remote).await?,
        ));
    }
    let scheme = url.split(':').next().unwrap_or_default();
    let feature = if is_postgres(url) {
        Some("postgres")
    } else if url.starts_with("sqlite:") {
        Some("sqlite")
    } else if url.starts_with("tcp://") {
        Some("remote")
    } else {
        None
    };
    Err(match feature {
        Some(feature) => Error::Unsupported(format!(
            "database URL {scheme:?}: this build of hopper has no `{feature}` feature (enable it in Cargo.toml)"
        )),
        None => Error::InvalidInput(format!(
            "unsupported database URL {scheme:?}: expected postgres://, postgresql://, key=value (libpq), sqlite:// (or sqlite::memory:) or tcp://"
        )),
    })
}

/// Whether `url` names PostgreSQL: a `postgres://` or `postgresql://` URL, or libpq's
/// `key=value` form.
fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://") || is_key_values(url)
}

/// Whether `url` is a libpq `key=value` connection string (`host=… dbname=…`) rather than
/// a URL: no scheme, and a first word that is a keyword followed by `=`.
fn is_key_values(url: &str) -> bool {
    !url.contains("://")
        && url.trim_start().split_once('=').is_some_and(|(key, _)| {
            let key = key.trim_end();
            !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

impl Client {
    /// A client over `backend`.
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Client {
            backend,
            middleware: Chain::default(),
        }
    }

    /// This client with `middleware` run on every enqueue, after those added before it
    /// (see [`crate::middleware`]).
    pub fn with_middleware(self, middleware: impl Middleware) -> Self {
        Client {
            middleware: self.middleware.with(Arc::new(middleware)),
            ..self
        }
    }

    /// Connects to `url` (see [`connect`]) with default options (schema `hopper`).
    pub async fn connect(url: &str) -> Result<Self> {
        Ok(Client::new(connect(url, ConnectOptions::default()).await?))
    }

    /// The backend underneath.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// Applies pending migrations; returns those applied (none when up to date).
    pub async fn migrate(&self) -> Result<Vec<AppliedMigration>> {
        self.backend.migrate().await
    }

    /// Enqueues typed `args` with default options. Returns the job's id.
    pub async fn enqueue<A: JobArgs>(&self, args: &A) -> Result<JobId> {
        self.insert(NewJob::of(args)?).await
    }

    /// Inserts a job built with [`NewJob`] (any options). Returns its id.
    ///
    /// A job with a unique key whose key is taken answers the holder's id under the
    /// `ignore` policy, fails with [`Error::Conflict`] under `reject` (see
    /// [`Client::upsert`] for the full outcome).
    pub async fn insert(&self, job: NewJob) -> Result<JobId> {
        let span = self.enqueue_span(std::slice::from_ref(&job));
        let insert = async move {
            let mut job = job;
            self.middleware
                .enqueue(std::slice::from_mut(&mut job))
                .await?;
            self.insert_prepared(job).await
        };
        spans::seam(span, insert, spans::uncounted).await
    }

    /// [`Client::insert`] once the middleware ran.
    async fn insert_prepared(&self, job: NewJob) -> Result<JobId> {
        job.validate()?;
        if job.needs_upsert() {
            let id = job.id;
            let outcomes = self.upsert_prepared(std::slice::from_ref(&job)).await?;
            let outcome = outcomes
                .into_iter()
                .next()
                .unwrap_or(InsertOutcome::Inserted);
            return Ok(outcome.id(id));
        }
        self.backend.job_insert(&job).await?;
        metrics::enqueued(&job.queue, &job.kind, 1);
        Ok(job.id)
    }

    /// Inserts many jobs in one transaction with binary COPY: all or nothing. Every job is
    /// validated first, so one bad job writes nothing. Jobs with unique keys are honoured
    /// (see [`Client::upsert_many`] for what became of each).
    pub async fn insert_many(&self, jobs: &[NewJob]) -> Result<()> {
        let insert = async {
            let jobs = self.prepared(jobs).await?;
            self.insert_many_prepared(&jobs).await
        };
        spans::seam(self.enqueue_span(jobs), insert, spans::uncounted).await
    }

    /// The `hopper.enqueue` span of `jobs`, handed to the middleware before it starts.
    pub(crate) fn enqueue_span(&self, jobs: &[NewJob]) -> tracing::Span {
        let span = spans::enqueue_many(jobs);
        if !self.middleware.is_empty() {
            self.middleware.enqueue_span(jobs, &span);
        }
        span
    }

    /// `jobs` as the enqueue middleware leave them (borrowed when there is none).
    pub(crate) async fn prepared<'a>(&self, jobs: &'a [NewJob]) -> Result<Cow<'a, [NewJob]>> {
        if self.middleware.is_empty() {
            return Ok(Cow::Borrowed(jobs));
        }
        let mut jobs = jobs.to_vec();
        self.middleware.enqueue(&mut jobs).await?;
        Ok(Cow::Owned(jobs))
    }

    /// [`Client::insert_many`] once the middleware ran.
    async fn insert_many_prepared(&self, jobs: &[NewJob]) -> Result<()> {
        for job in jobs {
            job.validate()?;
        }
        if jobs.iter().any(NewJob::needs_upsert) {
            self.upsert_prepared(jobs).await?;
            return Ok(());
        }
        self.backend.job_insert_many(jobs).await?;
        count_enqueued(jobs);
        Ok(())
    }

    /// Reads a job.
    pub async fn job(&self, id: JobId) -> Result<Option<JobRecord>> {
        self.backend.job_get(&JobGetParams { id }).await
    }

    /// The per-attempt logs of a job (see [`crate::JobContext::log`]), oldest attempt
    /// first; empty when it has none or the backend keeps no logs.
    pub async fn job_logs(&self, id: JobId) -> Result<Vec<hopper_core::job_log::AttemptLog>> {
        match self.backend.logs() {
            Some(store) => store.job_logs(id).await,
            None => Ok(Vec::new()),
        }
    }

    /// Lists jobs, newest first.
    pub async fn jobs(&self, params: &JobListParams) -> Result<Vec<JobRecord>> {
        self.backend.job_list(params).await
    }

    /// Retries a failed or cancelled job now, with a fresh set of attempts.
    pub async fn retry(&self, id: JobId) -> Result<JobRecord> {
        self.backend.job_retry(&JobRetryParams { id }).await
    }

    /// Cancels a job that has not finished; a running job's handler is told to stop.
    pub async fn cancel(&self, id: JobId) -> Result<JobRecord> {
        self.backend.job_cancel(&JobCancelParams { id }).await
    }

    /// Deletes every job of `queue` (or of all queues) that is not running.
    pub async fn clear(&self, queue: Option<&str>) -> Result<u64> {
        self.backend
            .job_clear(&JobClearParams {
                queue: queue.map(str::to_owned),
            })
            .await
    }

    /// Counts by queue and state.
    pub async fn stats(&self) -> Result<Vec<QueueStats>> {
        self.backend.queue_stats().await
    }

    /// One page of the registered nodes (runtimes and `hopper serve` processes) by name,
    /// with the queues each serves and its last heartbeat, and the cursor of the next page
    /// (`params.before` of the next call; see [`hopper_core::node_list`]). A `limit` of 0
    /// is [`Error::InvalidInput`]; [`Error::Unsupported`] on a backend that keeps no
    /// statistics. Over the remote transport, the server's database's nodes (an admin
    /// request), whose `limit` is at most 1,000 (the server's bound, as for jobs).
    pub async fn nodes(&self, params: &NodeListParams) -> Result<NodePage> {
        match self.backend.stats() {
            Some(store) => store.node_list(params).await,
            None => Err(Error::Unsupported(format!(
                "listing nodes ({} backend)",
                self.backend.name()
            ))),
        }
    }
}

/// Counts a committed batch by queue and kind, one counter update per pair.
fn count_enqueued(jobs: &[NewJob]) {
    let mut counts: std::collections::HashMap<(&str, &str), u64> = std::collections::HashMap::new();
    for job in jobs {
        *counts.entry((&job.queue, &job.kind)).or_default() += 1;
    }
    for ((queue, kind), n) in counts {
        metrics::enqueued(queue, kind, n);
    }
}
