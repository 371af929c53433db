//! The working commands: `worker-drain` (W3) and `worker-latency` (W4), one
//! [`Runtime`] each with the harness's concurrency and a handler that does nothing.

use std::io::Write;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use hopper::{Client, JobArgs, JobContext, JobError, Runtime, RuntimeConfig, Worker, Workers};
use serde::{Deserialize, Serialize};

/// The kind of every job the adapter enqueues and runs.
pub const KIND: &str = "peer";

/// A job's arguments: `{"n": i}`, plus `t` (epoch ms at enqueue) for W4.
#[derive(Debug, Serialize, Deserialize)]
pub struct PeerJob {
    /// Its number in the workload.
    pub n: u64,
    /// When it was enqueued, in ms since the Unix epoch (W4 only).
    #[serde(default)]
    pub t: Option<f64>,
}

impl JobArgs for PeerJob {
    const KIND: &'static str = KIND;
}

/// Does nothing; with `latencies`, records now − `t` of each job first.
struct PeerWorker {
    latencies: Option<Arc<Latencies>>,
}

/// W4's samples and the signal that the last one came.
struct Latencies {
    expected: usize,
    samples: Mutex<Vec<f64>>,
    all_in: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl Worker for PeerWorker {
    type Args = PeerJob;

    async fn process(&self, _ctx: &JobContext, args: PeerJob) -> Result<(), JobError> {
        if let (Some(latencies), Some(t)) = (&self.latencies, args.t) {
            let ms = crate::now_ms() - t;
            let mut samples = latencies.samples.lock().unwrap_or_else(|e| e.into_inner());
            samples.push(ms);
            if samples.len() == latencies.expected {
                latencies.all_in.notify_one();
            }
        }
        Ok(())
    }
}

fn runtime(client: &Client, concurrency: usize, latencies: Option<Arc<Latencies>>) -> Runtime {
    let mut workers = Workers::new();
    workers.register(PeerWorker { latencies });
    let defaults = RuntimeConfig::default();
    let prefetch = env_count("HOPPER_PREFETCH").or(defaults.prefetch);
    let claims_in_flight =
        env_count("HOPPER_CLAIMS_IN_FLIGHT").unwrap_or(defaults.claims_in_flight);
    let config = defaults
        .with_concurrency(concurrency)
        .with_node_name(format!("hopper-bench-peer:{}", std::process::id()))
        .with_prefetch(prefetch)
        .with_claims_in_flight(claims_in_flight);
    Runtime::new(client.backend().clone(), workers, config)
}

/// A count from the environment (`HOPPER_PREFETCH`, `HOPPER_CLAIMS_IN_FLIGHT`: for tuning
/// runs, set by a variant in `adapter.json`); unset or not a number: none.
fn env_count(name: &str) -> Option<usize> {
    std::env::var(name).ok()?.trim().parse().ok()
}

/// W3: prints `T0` just before the runtime starts, then runs until SIGTERM or SIGINT (the
/// harness counts the jobs left in the database).
pub async fn drain(client: &Client, concurrency: usize) -> anyhow::Result<()> {
    let runtime = runtime(client, concurrency, None);
    say(&format!("T0 {}", crate::now_ms()))?;
    let handle = runtime.start().await.context("starting the runtime")?;
    handle.run_until_signal().await;
    Ok(())
}

/// W4: prints `READY` once the runtime runs, and `LAT [ms, …]` once `jobs` jobs have
/// started; then shuts down.
pub async fn latency(client: &Client, concurrency: usize, jobs: u64) -> anyhow::Result<()> {
    let latencies = Arc::new(Latencies {
        expected: usize::try_from(jobs).context("N is too large")?,
        samples: Mutex::new(Vec::new()),
        all_in: tokio::sync::Notify::new(),
    });
    let handle = runtime(client, concurrency, Some(latencies.clone()))
        .start()
        .await
        .context("starting the runtime")?;
    say("READY")?;
    if jobs > 0 {
        tokio::select! {
            _ = latencies.all_in.notified() => {}
            _ = hopper::shutdown_signal() => {}
        }
    }
    let samples = std::mem::take(&mut *latencies.samples.lock().unwrap_or_else(|e| e.into_inner()));
    say(&format!("LAT {}", serde_json::to_string(&samples)?))?;
    handle.shutdown().await;
    Ok(())
}

/// One line on stdout, flushed at once (the harness waits for it).
fn say(line: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}
