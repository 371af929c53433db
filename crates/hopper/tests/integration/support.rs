//! Helpers shared by the PostgreSQL and runtime tests: raw connections, throw-away schemas,
//! closure-backed workers, and runtime settings for tests.

#![allow(dead_code)]

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use hopper::backend::Backend;
use hopper::testing::TestDatabase;
use hopper::{
    JobArgs, JobContext, JobError, PgBackend, PgOptions, QueueStats, RuntimeConfig, SystemClock,
    Worker, Workers,
};
use tokio::sync::Notify;
use tokio_postgres::NoTls;

/// A plain connection of the test's own (for transactions and raw SQL).
pub async fn connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// A schema name no other test uses, for tests that need an unmigrated one.
pub fn fresh_schema_name(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// Drops a schema when dropped (like `TestDatabase`, for schemas a test creates itself).
pub struct SchemaGuard {
    pub url: String,
    pub schema: String,
}

impl Drop for SchemaGuard {
    fn drop(&mut self) {
        hopper::testing::drop_schema(&self.url, &self.schema);
    }
}

/// Another backend on the test's schema with its own small pool: a separate "node".
pub async fn node_backend(db: &TestDatabase, pool_size: usize) -> anyhow::Result<Arc<dyn Backend>> {
    let backend = PgBackend::connect(
        db.url(),
        PgOptions::default()
            .with_schema(db.schema())
            .with_pool_size(pool_size)
            .with_clock(Arc::new(SystemClock)),
    )
    .await?;
    Ok(Arc::new(backend))
}

/// Runtime settings for tests: one queue, quick maintenance, polling slow enough that a
/// test which must be woken by a notification cannot pass by polling instead.
pub fn config(queue: &str, concurrency: usize) -> RuntimeConfig {
    RuntimeConfig::default()
        .with_queues([queue])
        .with_concurrency(concurrency)
        .with_poll_interval(Duration::from_secs(5))
        .with_heartbeat_interval(Duration::from_millis(200))
        .with_rescue_interval(Duration::from_millis(100))
        .with_shutdown_timeout(Duration::from_secs(5))
}

/// Waits for a condition on one queue's counts, as an `anyhow` error when it times out.
pub async fn wait_for(
    db: &TestDatabase,
    queue: &str,
    limit: Duration,
    done: impl Fn(&QueueStats) -> bool,
) -> anyhow::Result<QueueStats> {
    db.wait_for(queue, limit, done)
        .await
        .map_err(anyhow::Error::msg)
}

/// Declares a job kind: a struct with a number `n` whose `JobArgs::KIND` is `$kind`.
#[allow(unused_macros)]
macro_rules! job_kind {
    ($name:ident, $kind:literal) => {
        #[doc = concat!("Arguments of the `", $kind, "` job kind.")]
        #[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
        pub struct $name {
            /// A number, whatever the test makes of it.
            pub n: u64,
        }

        impl hopper::JobArgs for $name {
            const KIND: &'static str = $kind;
        }
    };
}

job_kind!(Gated, "gated");

/// Enqueues one `Gated` job on `queue` of `db`.
pub async fn insert_gated(db: &TestDatabase, queue: &str) -> anyhow::Result<hopper::JobId> {
    let job = hopper::NewJob::of(&Gated { n: 0 })?.with_queue(queue);
    Ok(hopper::Client::new(db.backend()).insert(job).await?)
}

/// Workers whose `Gated` handler says it started (`reached`), then returns when told (`go`).
pub fn gated_workers() -> (Workers, Arc<Notify>, Arc<Notify>) {
    let (reached, go) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let mut workers = Workers::new();
    workers.register(FnWorker::new({
        let (reached, go) = (reached.clone(), go.clone());
        move |_, _: Gated| {
            let (reached, go) = (reached.clone(), go.clone());
            async move {
                reached.notify_one();
                go.notified().await;
                Ok(())
            }
        }
    }));
    (workers, reached, go)
}

type Handler<A> = dyn Fn(JobContext, A) -> BoxFuture<'static, Result<(), JobError>> + Send + Sync;

/// A worker whose `process` is a closure, with a settable timeout and a fixed backoff.
pub struct FnWorker<A> {
    handler: Box<Handler<A>>,
    timeout: Option<Duration>,
    backoff: Duration,
    _args: PhantomData<fn() -> A>,
}

impl<A: JobArgs> FnWorker<A> {
    /// A worker running `f` for each job, retrying after 10 ms.
    pub fn new<F, Fut>(f: F) -> Self
    where
        F: Fn(JobContext, A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), JobError>> + Send + 'static,
    {
        FnWorker {
            handler: Box::new(move |ctx, args| Box::pin(f(ctx, args))),
            timeout: None,
            backoff: Duration::from_millis(10),
            _args: PhantomData,
        }
    }

    /// Overrides the jobs' stored timeout (`Worker::timeout`).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the delay before each retry (`Worker::backoff`).
    pub fn with_backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }
}

#[async_trait::async_trait]
impl<A: JobArgs> Worker for FnWorker<A> {
    type Args = A;

    async fn process(&self, ctx: &JobContext, args: A) -> Result<(), JobError> {
        (self.handler)(ctx.clone(), args).await
    }

    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    fn backoff(&self, _attempt: i32) -> Duration {
        self.backoff
    }
}

/// Releases the nodes of `h` silent for 30 s, as every node's rescuer does; an error if
/// that waits 5 s (on a row another transaction holds).
pub async fn release_silent_nodes(h: &hopper_conformance::Harness) -> anyhow::Result<u64> {
    let silent = hopper_core::backend::NodeReleaseDeadParams {
        dead_after: Duration::from_secs(30),
    };
    tokio::time::timeout(
        Duration::from_secs(5),
        h.maintenance().node_release_dead(&silent),
    )
    .await
    .map_err(|_| anyhow::anyhow!("the release of silent nodes waited on a held row"))?
    .map_err(anyhow::Error::from)
}

/// Checks `done` every 20 ms until it says true; an error saying `what` if it has not
/// within `limit`. For conditions only the database shows (a lease moved, a row aged).
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut done: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !done().await? {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Holds the row of job `id` in a transaction of its own on `db` (`SELECT … FOR UPDATE`),
/// for the conformance cases that hold one ([`hopper_conformance::Harness::with_job_holds`]).
pub async fn hold_job(
    db: &TestDatabase,
    id: hopper::JobId,
) -> anyhow::Result<hopper_conformance::JobHold> {
    let hold = db.hold_job(id).await?;
    Ok(hopper_conformance::JobHold::new(async move {
        Ok(hold.release().await?)
    }))
}
