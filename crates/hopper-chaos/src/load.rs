//! A steady load for the pinned-xmin and soak runs: jobs enqueued at a fixed rate (binary
//! COPY, ten batches a second) and one runtime draining them with no-op handlers, sampled
//! at intervals: throughput, enqueue→start latency, a timed probe of the claim's index
//! walk, live and dead tuples, table and index sizes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper::backend::Backend;
use hopper::maintenance::Housekeeping;
use hopper::{
    Client, JobArgs, JobContext, JobError, NewJob, PgBackend, PgOptions, Runtime, RuntimeConfig,
    RuntimeHandle, Worker, Workers,
};
use serde::{Deserialize, Serialize};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The load's job: nothing to do.
#[derive(Debug, Serialize, Deserialize)]
struct LoadJob {
    n: u64,
}

impl JobArgs for LoadJob {
    const KIND: &'static str = "load";
}

/// What the handlers and the enqueuer count.
#[derive(Debug, Default)]
struct Counters {
    enqueued: AtomicU64,
    done: AtomicU64,
    /// Enqueue→start latencies (µs) since the last sample.
    latencies: Mutex<Vec<u64>>,
}

/// Records the latency, succeeds.
struct NoOp(Arc<Counters>);

#[async_trait::async_trait]
impl Worker for NoOp {
    type Args = LoadJob;

    async fn process(&self, ctx: &JobContext, _args: LoadJob) -> Result<(), JobError> {
        let due = ctx.job().run_at.max(ctx.job().created_at);
        let waited = (chrono::Utc::now() - due).num_microseconds().unwrap_or(0);
        if let Ok(mut l) = self.0.latencies.lock() {
            l.push(u64::try_from(waited).unwrap_or(0));
        }
        self.0.done.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// How the load runs.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Jobs enqueued per second.
    pub rate: u64,
    /// The runtime's concurrency.
    pub concurrency: usize,
    /// How long completed jobs are kept (the runtime prunes them after that).
    pub retention: Duration,
    /// How often the runtime prunes.
    pub prune_interval: Duration,
}

/// One sample of the load.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Seconds since the load started.
    pub t: f64,
    /// The phase the run was in.
    pub phase: String,
    /// Jobs run per second over the interval.
    pub done_per_s: f64,
    /// Jobs enqueued per second over the interval.
    pub enqueued_per_s: f64,
    /// Enqueued and not yet run.
    pub backlog: i64,
    /// Enqueue→start latency, median (ms).
    pub p50_ms: f64,
    /// Enqueue→start latency, 99th percentile (ms).
    pub p99_ms: f64,
    /// The claim probe's execution time (ms).
    pub probe_ms: f64,
    /// Pages the claim probe touched.
    pub probe_pages: i64,
    /// Live tuples of hopper.jobs (estimate).
    pub live: i64,
    /// Dead tuples of hopper.jobs (estimate).
    pub dead: i64,
    /// hopper.jobs heap (MB).
    pub heap_mb: f64,
    /// All its indexes (MB).
    pub indexes_mb: f64,
    /// jobs_claim_idx (MB).
    pub claim_index_mb: f64,
    /// Vacuums of hopper.jobs so far (auto + manual).
    pub vacuums: i64,
}

impl Sample {
    /// The header of [`Sample::line`].
    pub fn header() -> &'static str {
        "     t phase     done/s   enq/s  backlog  p50ms   p99ms probe_ms pages      live      dead heapMB  idxMB claimMB vac"
    }

    /// One line of the table.
    pub fn line(&self) -> String {
        format!(
            "{:>6.0} {:<8} {:>7.0} {:>7.0} {:>8} {:>6.1} {:>7.1} {:>8.2} {:>5} {:>9} {:>9} {:>6.1} {:>6.1} {:>7.2} {:>3}",
            self.t,
            self.phase,
            self.done_per_s,
            self.enqueued_per_s,
            self.backlog,
            self.p50_ms,
            self.p99_ms,
            self.probe_ms,
            self.probe_pages,
            self.live,
            self.dead,
            self.heap_mb,
            self.indexes_mb,
            self.claim_index_mb,
            self.vacuums
        )
    }
}

/// A running load.
pub struct Load {
    counters: Arc<Counters>,
    runtime: RuntimeHandle,
    enqueuer: JoinHandle<()>,
    admin: deadpool_postgres::Pool,
    started: Instant,
    last: (Instant, u64, u64),
}

impl Load {
    /// Migrates the run's database and starts enqueuing and draining.
    pub async fn start(url: &str, config: &LoadConfig) -> anyhow::Result<Load> {
        let backend = PgBackend::connect(url, PgOptions::default()).await?;
        backend.migrate().await?;
        let backend: Arc<dyn Backend> = Arc::new(backend);
        let counters = Arc::new(Counters::default());
        let mut workers = Workers::new();
        workers.register(NoOp(counters.clone()));
        let runtime = Runtime::new(
            backend.clone(),
            workers,
            RuntimeConfig::default()
                .with_concurrency(config.concurrency)
                .with_housekeeping(
                    Housekeeping::default()
                        .with_completed_retention(config.retention)
                        .with_prune_interval(Some(config.prune_interval)),
                )
                .with_node_name("hopper-chaos-load"),
        )
        .start()
        .await?;
        let enqueuer = tokio::spawn(enqueue(Client::new(backend), config.rate, counters.clone()));
        let started = Instant::now();
        Ok(Load {
            counters,
            runtime,
            enqueuer,
            admin: crate::db::pool(url, 1)?,
            started,
            last: (started, 0, 0),
        })
    }

    /// Seconds since the start.
    pub fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// A sample over the time since the last one.
    pub async fn sample(&mut self, phase: &str) -> anyhow::Result<Sample> {
        let now = Instant::now();
        let done = self.counters.done.load(Ordering::Relaxed);
        let enqueued = self.counters.enqueued.load(Ordering::Relaxed);
        let (then, done_then, enqueued_then) = self.last;
        self.last = (now, done, enqueued);
        let secs = now.duration_since(then).as_secs_f64().max(1e-3);
        let mut latencies = self
            .counters
            .latencies
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default();
        latencies.sort_unstable();
        let admin = self.admin.get().await?;
        let tables = admin
            .query_one(include_str!("sql/sample_tables.sql"), &[])
            .await?;
        let plan: serde_json::Value = admin
            .query_one(include_str!("sql/claim_probe.sql"), &[])
            .await?
            .get(0);
        let mb = |i: usize| tables.get::<_, i64>(i) as f64 / 1_048_576.0;
        Ok(Sample {
            t: self.elapsed(),
            phase: phase.to_owned(),
            done_per_s: (done - done_then) as f64 / secs,
            enqueued_per_s: (enqueued - enqueued_then) as f64 / secs,
            backlog: i64::try_from(enqueued.saturating_sub(done)).unwrap_or(i64::MAX),
            p50_ms: percentile(&latencies, 0.50),
            p99_ms: percentile(&latencies, 0.99),
            probe_ms: plan[0]["Execution Time"].as_f64().unwrap_or(f64::NAN),
            probe_pages: pages(&plan[0]["Plan"]),
            live: tables.get(0),
            dead: tables.get(1),
            heap_mb: mb(2),
            indexes_mb: mb(3),
            claim_index_mb: mb(4),
            vacuums: tables.get(5),
        })
    }

    /// Stops enqueuing and the runtime.
    pub async fn stop(self) {
        self.enqueuer.abort();
        self.runtime.shutdown().await;
    }
}

/// The `q` quantile of sorted µs, in ms (NaN if none).
fn percentile(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)] as f64 / 1000.0
}

/// Shared pages hit and read by a plan node (EXPLAIN counts its children in).
fn pages(plan: &serde_json::Value) -> i64 {
    ["Shared Hit Blocks", "Shared Read Blocks"]
        .iter()
        .filter_map(|k| plan[*k].as_i64())
        .sum()
}

/// Enqueues at `rate` per second: every 100 ms, as many as the elapsed time asks for (at
/// most one second's worth at once, so a stall does not become a flood).
async fn enqueue(client: Client, rate: u64, counters: Arc<Counters>) {
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut sent = 0u64;
    loop {
        tick.tick().await;
        let due = (started.elapsed().as_secs_f64() * rate as f64) as u64;
        let n = due.saturating_sub(sent).min(rate.max(1));
        if n == 0 {
            continue;
        }
        let jobs: Result<Vec<NewJob>, _> = (sent..sent + n)
            .map(|n| NewJob::of(&LoadJob { n }))
            .collect();
        let inserted = match jobs {
            Ok(jobs) => client.insert_many(&jobs).await,
            Err(e) => Err(e),
        };
        match inserted {
            Ok(()) => {
                sent += n;
                counters.enqueued.fetch_add(n, Ordering::Relaxed);
            }
            Err(e) => {
                eprintln!("enqueue failed: {e}");
                sent += n; // offered and refused: the next batches do not make up for it
            }
        }
    }
}
