//! `hopper bench`: the standard workloads of `BENCHMARK.md`, run against the configured
//! database, all on the queue `bench` with jobs of kind `bench`.
//!
//! - `enqueue` (W1): bulk enqueue through [`hopper::Client::insert_many`], 1,000 per call;
//! - `enqueue-single` (W2): one [`hopper::Client::insert`] at a time, sequential;
//! - `drain` (W3): a [`hopper::Runtime`] runs until no unfinished bench job is left in the
//!   database, whoever enqueued them, then shuts down (so a killed drain, started again,
//!   finishes the work);
//! - `latency` (W4): enqueue→start latency on an idle runtime at 200 jobs/s;
//! - `all`: clear the bench queue, W1, W3 (draining W1's jobs), W2, clear, W4;
//! - `server-drain` (W7), `server-latency`, `server`: the same through `hopper serve`
//!   with remote workers (see `bench/server.rs`).
//!
//! Each workload prints one line of text, or one JSON object per line with `--json`. The
//! figures and how they compare with PostgreSQL's own limits are in `docs/benchmarks.md`.
//!
//! The drain (W3) also reports what it cost the database per job (WAL bytes, WAL records,
//! commits; `bench/cost.rs`). Two longer workloads are not part of `all`: `claim-scale`
//! (W5, the claim rate at the head of a 1,000,000-job backlog against a 1,000-job one;
//! `bench/w5.rs`) and `soak` (W6, `--duration` at 70% of the W3 rate; `bench/soak.rs`).

mod cost;
mod counting;
mod db;
mod drain;
mod enqueue;
mod job;
mod latency;
mod report;
mod server;
mod soak;
mod w5;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hopper::Client;
use hopper::backend::Backend;

use crate::cli::{BenchArgs, Workload};
use crate::output::invalid_input;

pub use job::BenchWorker;
pub use report::Report;

/// The queue every bench job goes to.
pub const QUEUE: &str = "bench";

/// Runtime settings a bench run may override, for tuning experiments.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tuning {
    /// `RuntimeConfig::prefetch`.
    pub prefetch: Option<usize>,
    /// `RuntimeConfig::claims_in_flight`.
    pub claims_in_flight: Option<usize>,
}

/// Everything a workload needs: the client, the options, how to print.
#[derive(Debug)]
pub struct Bench {
    /// The client on the configured database.
    pub client: Client,
    /// Worker concurrency for drain and latency.
    pub concurrency: usize,
    /// How long each bench job sleeps.
    pub work: Duration,
    /// Lines each bench job logs.
    pub log_lines: u32,
    /// The timeout (and lease) of the bench jobs a runtime runs, if set.
    pub job_timeout: Option<Duration>,
    /// The runtime's prefetch and claims in flight, where set (else the defaults).
    pub tuning: Tuning,
    /// Print JSON lines instead of text (and no progress bars).
    pub json: bool,
    /// The server workloads encrypt with CURVE.
    pub curve: bool,
}

impl Bench {
    /// Prints one workload's figures.
    fn print(&self, report: &Report) {
        if self.json {
            println!("{}", report.to_json());
        } else {
            println!("{report}");
        }
    }
}

/// Runs the workload(s) chosen by `args`.
pub async fn run(backend: Arc<dyn Backend>, args: BenchArgs, json: bool) -> anyhow::Result<()> {
    let job_timeout = args
        .job_timeout
        .as_deref()
        .map(humantime::parse_duration)
        .transpose()
        .context("--job-timeout (e.g. 2s, 500ms)")
        .map_err(invalid_input)?;
    if job_timeout.is_some_and(|t| t < Duration::from_millis(10)) {
        return Err(invalid_input(anyhow::anyhow!(
            "--job-timeout must be at least 10ms"
        )));
    }
    if args.concurrency == 0 {
        return Err(invalid_input(anyhow::anyhow!(
            "--concurrency must be at least 1"
        )));
    }
    let bench = Bench {
        client: crate::telemetry::client(backend),
        concurrency: args.concurrency,
        work: Duration::from_millis(args.work_ms),
        log_lines: args.log_lines,
        job_timeout,
        tuning: Tuning {
            prefetch: args.prefetch,
            claims_in_flight: args.claims_in_flight,
        },
        json,
        curve: args.curve,
    };
    let jobs = args.jobs;
    match args.workload {
        Workload::Enqueue => bench.print(&enqueue::bulk(&bench, jobs.unwrap_or(100_000)).await?),
        Workload::EnqueueSingle => {
            bench.print(&enqueue::single(&bench, jobs.unwrap_or(10_000)).await?)
        }
        Workload::Drain => cost::drain(&bench).await?,
        Workload::Latency => bench.print(&latency::run(&bench, jobs.unwrap_or(2_000)).await?),
        Workload::All => all(&bench, jobs).await?,
        Workload::ClaimScale => {
            let report = w5::run(&bench, jobs.unwrap_or(100_000), args.backlog).await?;
            w5::print(&bench, &report);
        }
        Workload::Soak => {
            let duration = humantime::parse_duration(&args.duration)
                .context("--duration (e.g. 10m, 90s)")
                .map_err(invalid_input)?;
            let report = soak::run(&bench, duration, args.rate).await?;
            soak::print(&bench, &report);
        }
        Workload::ServerDrain => bench.print(&server::drain(&bench).await?),
        Workload::ServerLatency => {
            bench.print(&server::latency(&bench, jobs.unwrap_or(2_000)).await?)
        }
        Workload::Server => {
            let jobs = jobs.unwrap_or(100_000);
            server::compare(&bench, jobs, (jobs / 50).clamp(1, 2_000)).await?
        }
    }
    Ok(())
}

/// W1, W3, W2, W4 in the order and with the housekeeping of `bench-peers/harness.py`:
/// `VACUUM ANALYZE` after the bulk enqueue and after the clear before W4.
async fn all(bench: &Bench, jobs: Option<u64>) -> anyhow::Result<()> {
    clear(bench).await?;
    bench.print(&enqueue::bulk(bench, jobs.unwrap_or(100_000)).await?);
    db::vacuum(&bench.client).await?;
    cost::drain(bench).await?;
    bench.print(&enqueue::single(bench, jobs.map_or(10_000, |n| n / 10).max(1)).await?);
    clear(bench).await?;
    db::vacuum(&bench.client).await?;
    bench.print(&latency::run(bench, jobs.map_or(2_000, |n| n / 50).max(1)).await?);
    Ok(())
}

/// Deletes every bench job that is not running.
async fn clear(bench: &Bench) -> anyhow::Result<()> {
    bench
        .client
        .clear(Some(QUEUE))
        .await
        .context("clearing the bench queue")?;
    Ok(())
}
