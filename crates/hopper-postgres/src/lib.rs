//! The PostgreSQL backend of hopper.
//!
//! [`PgBackend`] implements [`hopper_core::Backend`] over a `deadpool-postgres` pool, with
//! a dedicated connection for LISTEN. Every query is a `.sql` file in `src/queries/`, named
//! after the method that runs it, with the reasoning (which index, why) beside the hot
//! ones. Migrations are in `migrations/`, applied in the configured schema.
//!
//! Two things only PostgreSQL offers are here as inherent methods rather than on the seam:
//! enqueueing inside the caller's own transaction ([`PgBackend::enqueue_in`],
//! [`PgBackend::insert_in`], [`PgBackend::insert_many_in`]) and completing a job inside
//! the handler's transaction ([`PgBackend::complete_in`]). With the `sqlx` feature, the
//! same on a sqlx connection or transaction (`PgBackend::sqlx`).

/// How long a statement that can go around held rows waits for a row lock first (the
/// outcomes, `outcomes.rs`; a shared log writer's store, `logs.rs`): PostgreSQL's
/// `lock_timeout`, a literal for the settings their `concat!` builds. The locks they meet
/// in normal work (a cancel, a rescue, another statement over the same rows) last a
/// statement, milliseconds; a wait past this is another transaction holding the row, and
/// costs only the second try, which skips it.
macro_rules! lock_wait {
    () => {
        "100ms"
    };
}

mod backend;
mod capabilities;
mod conn;
mod connect;
mod copy;
mod cron;
mod cursor;
mod error;
mod hot;
mod listen;
mod liveness;
mod logs;
mod migrate;
mod outcomes;
mod poison;
mod pooled;
mod prune;
mod read_only;
mod rows;
mod scheduling;
mod settings;
pub mod sql;
#[cfg(feature = "sqlx")]
mod sqlx;
mod statement;
pub mod testing;
mod upsert;
mod vacuum;

use std::sync::Arc;

use deadpool_postgres::Pool;
use hopper_core::{
    Clock, Error, InsertOutcome, JobArgs, JobId, JobRecord, Lease, NewJob, Result, SystemClock,
    Wakeup,
};
use tokio::sync::OnceCell;
use tokio_postgres::types::Type;
use tokio_postgres::{GenericClient, Transaction};

#[cfg(feature = "tls")]
pub use connect::MakeRustlsConnect;
pub use connect::{ConnectError, PgConnectOptions, PgTls, PgTlsStream};
pub use cursor::{CLAIM_HEAD_SPACING, ClaimCursorConfig, ClaimStartMode};
pub use error::{map_pg, map_pool};
pub use liveness::{PING_PERIOD, PING_TIMEOUT};
use sql::Queries;
#[cfg(feature = "sqlx")]
pub use sqlx::SqlxJobs;
use statement::Ready;
pub use statement::{Pooler, Query};

/// How to connect, and where hopper's tables live. Built from [`PgOptions::default`] with
/// the `with_*` methods (or by setting its fields); `#[non_exhaustive]`, so a new option is
/// not a breaking change.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PgOptions {
    /// The schema holding hopper's tables (default `hopper`).
    pub schema: String,
    /// Pool size (default 10).
    pub pool_size: usize,
    /// The clock for every "now" (default: the database's `now()`).
    pub clock: Arc<dyn Clock>,
    /// What sits between hopper and PostgreSQL (default [`Pooler::None`]); set
    /// [`Pooler::Transaction`] behind PgBouncer in transaction mode (`docs/deployment.md`).
    pub pooler: Pooler,
    /// A URL straight to PostgreSQL, past the pooler, for what needs a session of its own:
    /// the LISTEN connection of wake-ups and cancellations. Used with
    /// [`Pooler::Transaction`] (without one, workers poll); otherwise the main URL serves.
    pub direct_url: Option<String>,
    /// The longest any statement of the pool waits for a lock (PostgreSQL's
    /// `lock_timeout`, set on each connection as it opens), past which it fails as a
    /// transient error; `None` (the default) or zero: the server's setting. Past 24 days,
    /// PostgreSQL's most, it is that. Behind a transaction pooler ([`Pooler::Transaction`]),
    /// where a session setting would not last, it bounds the statements that change jobs
    /// and queues on an operator's request (cancel, retry, delete, clear, queue settings),
    /// each then sent in a transaction of its own with the bound as a `SET LOCAL`; the
    /// others wait as the server's setting says. `hopper serve` bounds its HTTP API's
    /// connections so, and the `hopper` CLI its admin commands'.
    pub lock_timeout: Option<std::time::Duration>,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            schema: "hopper".to_owned(),
            pool_size: 10,
            clock: Arc::new(SystemClock),
            pooler: Pooler::None,
            direct_url: None,
            lock_timeout: None,
        }
    }
}

impl PgOptions {
    /// With hopper's tables in `schema`.
    pub fn with_schema(self, schema: impl Into<String>) -> Self {
        PgOptions {
            schema: schema.into(),
            ..self
        }
    }

    /// With a pool of `pool_size` connections.
    pub fn with_pool_size(self, pool_size: usize) -> Self {
        PgOptions { pool_size, ..self }
    }

    /// With `clock` for every "now" (tests: a [`hopper_core::TestClock`]).
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        PgOptions { clock, ..self }
    }

    /// With `pooler` between hopper and PostgreSQL.
    pub fn with_pooler(self, pooler: Pooler) -> Self {
        PgOptions { pooler, ..self }
    }

    /// With `direct_url` past the pooler for the LISTEN connection.
    pub fn with_direct_url(self, direct_url: impl Into<String>) -> Self {
        PgOptions {
            direct_url: Some(direct_url.into()),
            ..self
        }
    }

    /// With every statement of the pool waiting at most `lock_timeout` for a lock (see
    /// [`PgOptions::lock_timeout`]).
    pub fn with_lock_timeout(self, lock_timeout: std::time::Duration) -> Self {
        PgOptions {
            lock_timeout: Some(lock_timeout),
            ..self
        }
    }
}

/// The `lock_timeout` a pool's connections are given ([`PgOptions::lock_timeout`]), as
/// PostgreSQL reads it: none behind a transaction pooler or for zero, at least 1 ms, at most
/// what the setting holds (`i32::MAX` ms).
fn lock_timeout_setting(pooler: Pooler, bound: Option<std::time::Duration>) -> Option<String> {
    match (pooler, bound) {
        (Pooler::None, Some(t)) if !t.is_zero() => Some(format!(
            "{}ms",
            t.as_millis().clamp(1, i32::MAX.unsigned_abs().into())
        )),
        _ => None,
    }
}

/// Behind a transaction pooler, what opens the transaction of an operator's statement that
/// takes row locks, with the pool's lock bound as a `SET LOCAL` (`pooled.rs`,
/// `lock_bounded`): none without a bound, or directly connected, where each connection
/// holds the bound as its own setting.
fn local_lock_bound(pooler: Pooler, bound: Option<std::time::Duration>) -> Option<String> {
    match pooler {
        Pooler::None => None,
        Pooler::Transaction => lock_timeout_setting(Pooler::None, bound)
            .map(|t| pooled::begin_with_lock_timeout(Some(&t))),
    }
}

/// The PostgreSQL backend. Cheap to clone; clones share the pool.
#[derive(Debug, Clone)]
pub struct PgBackend {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pool: Pool,
    /// How every connection of the pool is made.
    connect: PgConnectOptions,
    /// How statements are sent (`statement.rs`).
    pooler: Pooler,
    /// What follows the outcome statements' first try (`outcomes.rs`): their settings
    /// undone, back to the pool's own lock bound if it has one.
    outcomes_after: String,
    /// The connection kept for the stores of shared log writers, with their lock bound
    /// (`logs.rs`); `None` behind a transaction pooler, where the bound is sent around
    /// each store. A pool of one, opened at the first such store.
    shared_writer: Option<deadpool_postgres::Pool>,
    /// What opens a shared log writer's second try (`logs.rs`), with the pool's lock bound
    /// if it has one (`pooled::begin_with_lock_timeout`).
    logs_around_held: String,
    /// What opens the transaction of an operator's row-locking statement behind a
    /// transaction pooler, with the pool's lock bound ([`local_lock_bound`]).
    local_lock_bound: Option<String>,
    /// Where the LISTEN connection goes: the main URL, the direct one behind a transaction
    /// pooler, or nowhere (behind a transaction pooler with no direct URL: polling).
    listen: Option<PgConnectOptions>,
    schema: String,
    queries: Queries,
    clock: Arc<dyn Clock>,
    state_type: OnceCell<Type>,
    /// Queue settings, which pick each queue's claim statement (`settings.rs`).
    settings: settings::Cache,
    /// Concurrent claims of a limited queue, combined into one (`scheduling/combine.rs`).
    combiner: scheduling::combine::Combiner,
    /// Where each queue's plain claims start (`cursor.rs`).
    cursors: cursor::Cursors,
    /// Jobs claims could not read, waiting to be failed (`poison.rs`).
    quarantine: poison::Quarantine,
    /// Wake-ups this process sends itself (a limited queue has room again), merged into
    /// every [`hopper_core::Backend::subscribe`] stream.
    local_wake: tokio::sync::broadcast::Sender<Wakeup>,
    /// Whether nodes hold a liveness lock (`liveness.rs`); on by default.
    liveness: std::sync::atomic::AtomicBool,
}

impl PgBackend {
    /// Connects to `url` (a `postgres://` URL or libpq's `key=value` string, read as
    /// [`PgConnectOptions::parse`] reads it: TLS, several hosts) and checks that the
    /// database answers.
    pub async fn connect(url: &str, options: PgOptions) -> Result<Self> {
        Self::connect_with(PgConnectOptions::parse(url)?, options).await
    }

    /// Connects with connection options already parsed (and perhaps adjusted).
    pub async fn connect_with(connect: PgConnectOptions, options: PgOptions) -> Result<Self> {
        hopper_core::policy::validate_sql_name("schema name", &options.schema)?;
        refuse_system_schema(&options.schema)?;
        let listen = match (options.pooler, &options.direct_url) {
            (Pooler::None, _) => Some(connect.clone()),
            (Pooler::Transaction, Some(direct)) => Some(PgConnectOptions::parse(direct)?),
            (Pooler::Transaction, None) => None,
        };
        let lock_timeout = lock_timeout_setting(options.pooler, options.lock_timeout);
        let setup = lock_timeout
            .as_ref()
            .map(|t| format!("SET lock_timeout = '{t}'"));
        let pool = connect.pool_with_setup(options.pool_size, setup)?;
        let shared_writer = match options.pooler {
            Pooler::None => {
                Some(connect.pool_with_setup(1, Some(logs::SHARED_WRITER_SETUP.to_owned()))?)
            }
            Pooler::Transaction => None,
        };
        let queries = Queries::new(&options.schema);
        // Fail now, with the reason in words, if the database cannot be reached or reads
        // the schema name as a key word.
        let client = pool.get().await.map_err(|e| connect.pool_error(e))?;
        refuse_keyword_schema(&client, &queries, &options.schema).await?;
        drop(client);
        let (local_wake, _) = tokio::sync::broadcast::channel(256);
        Ok(PgBackend {
            inner: Arc::new(Inner {
                pool,
                connect,
                pooler: options.pooler,
                outcomes_after: outcomes::after_first_try(options.pooler, lock_timeout.as_deref()),
                shared_writer,
                logs_around_held: pooled::begin_with_lock_timeout(lock_timeout.as_deref()),
                local_lock_bound: local_lock_bound(options.pooler, options.lock_timeout),
                listen,
                queries,
                schema: options.schema,
                clock: options.clock,
                state_type: OnceCell::new(),
                settings: settings::Cache::new(local_wake.clone()),
                combiner: scheduling::combine::Combiner::default(),
                cursors: cursor::Cursors::default(),
                quarantine: poison::Quarantine::default(),
                local_wake,
                liveness: std::sync::atomic::AtomicBool::new(true),
            }),
        })
    }

    /// The schema holding hopper's tables.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// Sets when plain claims leave the head of the claim index for the keys after the
    /// last one claimed, and how often they come back ([`ClaimCursorConfig`]; the default
    /// suits most; `with_slow_head(Duration::MAX)` keeps every claim at the head). Shared by
    /// every clone of this backend; takes effect from the next claim.
    pub fn set_claim_cursor(&self, config: ClaimCursorConfig) {
        self.inner.cursors.set_config(config);
    }

    /// Where the plain claims of `queue` start now: from the head (strict order) or after
    /// the last claimed key (head claims are slow).
    pub fn claim_start_mode(&self, queue: &str) -> ClaimStartMode {
        self.inner.cursors.mode(queue)
    }

    /// Turns node liveness ([`hopper_core::NodeLiveness`]) on or off for runtimes started
    /// on this backend from now on (shared by every clone). On by default: each node holds
    /// a session-level advisory lock on a connection of its own, and a crashed node's jobs
    /// are released within a second. Turn it off where a session lock means nothing (a
    /// pooler in transaction mode between hopper and PostgreSQL): nodes are then found
    /// dead by their silent heartbeats only (`node_dead_after`) and their leases.
    pub fn set_node_liveness(&self, on: bool) {
        self.inner
            .liveness
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// How this backend connects (for a tool that needs a connection of its own).
    pub fn connect_options(&self) -> &PgConnectOptions {
        &self.inner.connect
    }

    /// The connection pool, for applications that want to share it.
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// What sits between hopper and PostgreSQL ([`PgOptions::pooler`]): behind a
    /// transaction pooler, statements on [`PgBackend::pool`] connections must be unnamed.
    pub fn pooler(&self) -> Pooler {
        self.inner.pooler
    }

    /// Enqueues typed `args` with default options using the caller's client or
    /// transaction: the job exists only if the caller's transaction commits. Returns the
    /// job's id.
    pub async fn enqueue_in<A: JobArgs>(
        &self,
        client: &(impl GenericClient + Sync),
        args: &A,
    ) -> Result<JobId> {
        let job = NewJob::of(args)?;
        self.insert_in(client, &job).await?;
        Ok(job.id)
    }

    /// Inserts one job using the caller's client or transaction: the job commits or rolls
    /// back with the caller's own writes.
    pub async fn insert_in(
        &self,
        client: &(impl GenericClient + Sync),
        job: &NewJob,
    ) -> Result<()> {
        self.upsert_in(client, job).await.map(|_| ())
    }

    /// Inserts one job using the caller's client or transaction, honouring its group and
    /// unique key, and says what became of it (see [`InsertOutcome`]).
    pub async fn upsert_in(
        &self,
        client: &(impl GenericClient + Sync),
        job: &NewJob,
    ) -> Result<InsertOutcome> {
        self.upsert_on(
            &mut conn::Tokio {
                backend: self,
                client,
            },
            job,
        )
        .await
    }

    /// [`PgBackend::upsert_in`] on either driver.
    pub(crate) async fn upsert_on(
        &self,
        conn: &mut impl conn::Conn,
        job: &NewJob,
    ) -> Result<InsertOutcome> {
        job.validate()?;
        self.refresh_settings().await?;
        if self.needs_full_insert(job) {
            return self.upsert_one_in(conn, job).await;
        }
        conn.insert_plain(job).await?;
        Ok(InsertOutcome::Inserted)
    }

    /// Inserts a job that needs no upsert with `statement` (`job_insert.sql`, as text or
    /// prepared). On a pooled connection [`hopper_core::Backend::job_insert`] passes the
    /// connection's cached prepared statement, which saves a round trip per job.
    pub(crate) async fn insert_plain(
        &self,
        client: &impl GenericClient,
        statement: &Ready<'_>,
        job: &NewJob,
    ) -> Result<()> {
        let now = self.inner.clock.now();
        let timeout_ms = job.timeout_ms();
        let [id, queue, kind, args, priority, run_at, attempts, timeout] =
            conn::job_params(job, &timeout_ms);
        statement
            .execute(
                client,
                &[
                    id,
                    queue,
                    kind,
                    args,
                    priority,
                    run_at,
                    attempts,
                    timeout,
                    &now,
                    &tokio_postgres::types::Json(&job.meta),
                ],
            )
            .await
            .map_err(map_pg)?;
        Ok(())
    }

    /// Inserts many jobs with binary COPY inside the caller's transaction. Jobs with a
    /// group or a unique key (which COPY cannot honour) go through `INSERT … ON CONFLICT`
    /// instead, in the same transaction.
    pub async fn insert_many_in(&self, tx: &Transaction<'_>, jobs: &[NewJob]) -> Result<()> {
        self.upsert_many(tx, jobs).await.map(|_| ())
    }

    /// [`PgBackend::insert_many_in`], saying what became of each job (in order).
    pub async fn upsert_many(
        &self,
        tx: &Transaction<'_>,
        jobs: &[NewJob],
    ) -> Result<Vec<InsertOutcome>> {
        if self.needs_upsert_many(jobs).await? {
            return self.upsert_many_in(tx, jobs).await;
        }
        self.copy_in(tx, jobs).await?;
        Ok(vec![InsertOutcome::Inserted; jobs.len()])
    }

    /// Binary COPY of jobs already validated, inside `tx`.
    pub(crate) async fn copy_in(&self, tx: &Transaction<'_>, jobs: &[NewJob]) -> Result<()> {
        let state_type = self.state_type(tx).await?;
        copy::insert_jobs(
            tx,
            &self.inner.queries,
            state_type,
            jobs,
            self.now_or_local(),
        )
        .await
    }

    /// Validates `jobs` and says whether any needs `INSERT … ON CONFLICT` rather than
    /// COPY: a group, a unique key, or a queue whose jobs carry groups; behind a
    /// transaction pooler, every job (COPY needs a named statement there).
    pub(crate) async fn needs_upsert_many(&self, jobs: &[NewJob]) -> Result<bool> {
        for job in jobs {
            job.validate()?;
        }
        self.refresh_settings().await?;
        Ok(self.inner.pooler.unnamed() || jobs.iter().any(|job| self.needs_full_insert(job)))
    }

    /// The schema's `job_state` enum type (looked up once).
    pub(crate) async fn state_type(&self, client: &impl GenericClient) -> Result<&Type> {
        self.inner
            .state_type
            .get_or_try_init(|| copy::state_type(client, &self.inner.queries))
            .await
    }

    /// Completes a job inside the handler's own transaction, so the job's completion and
    /// the application's writes commit or roll back together. Fails with
    /// [`Error::LeaseLost`] (and changes nothing) if the lease is no longer current.
    pub async fn complete_in(
        &self,
        client: &(impl GenericClient + Sync),
        lease: Lease,
        duration_ms: i64,
    ) -> Result<()> {
        self.complete_on(
            &mut conn::Tokio {
                backend: self,
                client,
            },
            lease,
            duration_ms,
        )
        .await
    }

    /// [`PgBackend::complete_in`] on either driver.
    pub(crate) async fn complete_on(
        &self,
        conn: &mut impl conn::Conn,
        lease: Lease,
        duration_ms: i64,
    ) -> Result<()> {
        if conn
            .complete(lease, duration_ms, self.inner.clock.now())
            .await?
        {
            Ok(())
        } else {
            Err(Error::LeaseLost(lease))
        }
    }

    /// The newest `limit` jobs, newest first, as `client` sees them: inside a transaction,
    /// its own uncommitted inserts included. For tests (`hopper::testing`'s `_in`
    /// assertions), not for a hot path.
    pub async fn jobs_in(
        &self,
        client: &(impl GenericClient + Sync),
        limit: u32,
    ) -> Result<Vec<JobRecord>> {
        let rows = self
            .text(&self.inner.queries.job_list_in_transaction)
            .query(client, &[&i64::from(limit)])
            .await
            .map_err(map_pg)?;
        rows.iter()
            .map(|row| {
                let json: serde_json::Value = row.try_get(0).map_err(Error::database)?;
                serde_json::from_value(json).map_err(Error::from)
            })
            .collect()
    }

    /// "Now" by the injected clock, else by this host's (for what is decided here rather
    /// than in SQL: a bulk insert's due jobs, the claim cursor's intervals).
    pub(crate) fn now_or_local(&self) -> chrono::DateTime<chrono::Utc> {
        self.inner.clock.now().unwrap_or_else(chrono::Utc::now)
    }

    /// `query` ready to run on the pooled connection `client` (see [`Pooler::prepare`]).
    pub(crate) async fn prepare<'q>(
        &self,
        client: &'q deadpool_postgres::Object,
        query: &'q Query,
    ) -> Result<Ready<'q>> {
        self.inner
            .pooler
            .prepare(client, query)
            .await
            .map_err(map_pg)
    }

    /// `query` sent whole at each run (see [`Pooler::text`]).
    pub(crate) fn text<'q>(&self, query: &'q Query) -> Ready<'q> {
        self.inner.pooler.text(query)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pooled(&self.inner.pool).await
    }

    /// A connection of `pool` (one of this backend's), a failure to make one said as
    /// [`PgConnectOptions::pool_error`] says it (why TLS failed, a server that never
    /// answered).
    pub(crate) async fn pooled(&self, pool: &Pool) -> Result<deadpool_postgres::Object> {
        pool.get()
            .await
            .map_err(|e| self.inner.connect.pool_error(e))
    }
}

/// Refuses the schemas PostgreSQL keeps for itself: `pg_` names (which it refuses to
/// create, and whose `pg_temp` is each session's own) and `information_schema` (the SQL
/// standard's catalog views, where hopper's tables would sit among them).
fn refuse_system_schema(schema: &str) -> Result<()> {
    if schema.starts_with("pg_") || schema == "information_schema" {
        return Err(Error::InvalidInput(format!(
            "schema name {schema:?} is one PostgreSQL keeps for itself; choose another \
             (hopper's default is hopper)"
        )));
    }
    Ok(())
}

/// Refuses a schema name that the server's parser reads as a key word other than an
/// unreserved one (`schema_name_keyword.sql`): hopper splices the name into its statements
/// unquoted, where such a word is a syntax error (`CREATE SCHEMA select`, a type named
/// `time.job_state`). Asked of the server, whose list of key words grows with its version.
/// Sent as the unnamed statement whatever the pooler setting, so that the check itself
/// cannot fail behind a transaction pooler that hopper was not told of.
async fn refuse_keyword_schema(
    client: &deadpool_postgres::Object,
    queries: &Queries,
    schema: &str,
) -> Result<()> {
    let kind: Option<String> = Pooler::Transaction
        .text(&queries.schema_name_keyword)
        .query_opt(statement::driver(client), &[&schema])
        .await
        .map_err(map_pg)?
        .map(|row| row.get(0));
    match kind {
        None => Ok(()),
        Some(kind) => Err(Error::InvalidInput(format!(
            "schema name {schema:?} is an SQL key word to PostgreSQL ({kind}), which hopper's \
             statements cannot take as a schema name; choose another (hopper's default is \
             hopper)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_pools_lock_bound_is_a_setting_postgresql_takes() {
        let set = |bound| lock_timeout_setting(Pooler::None, bound);
        assert_eq!(set(None), None);
        assert_eq!(set(Some(Duration::ZERO)), None, "zero: the server's own");
        assert_eq!(set(Some(Duration::from_micros(10))), Some("1ms".into()));
        assert_eq!(
            set(Some(Duration::from_millis(1500))),
            Some("1500ms".into())
        );
        assert_eq!(
            set(Some(Duration::MAX)),
            Some(format!("{}ms", i32::MAX)),
            "past PostgreSQL's most, its most"
        );
        let behind_pooler = lock_timeout_setting(Pooler::Transaction, Some(Duration::from_secs(5)));
        assert_eq!(behind_pooler, None);
        // There, an operator's row-locking statement carries it in its own transaction.
        let local = |bound| local_lock_bound(Pooler::Transaction, bound);
        assert_eq!(
            local(Some(Duration::from_secs(5))).as_deref(),
            Some("BEGIN; SET LOCAL lock_timeout = '5000ms'")
        );
        assert_eq!(local(Some(Duration::ZERO)), None);
        assert_eq!(local(None), None);
        let direct = local_lock_bound(Pooler::None, Some(Duration::from_secs(5)));
        assert_eq!(direct, None, "a setting of each connection instead");
    }
}
