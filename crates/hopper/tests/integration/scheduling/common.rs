//! A probe worker that records when each job started and ended, and helpers to run
//! several runtimes on one schema (each with its own backend and pool, as separate nodes
//! would have).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper::backend::Backend;
use hopper::testing::TestDatabase;
use hopper::{
    JobArgs, JobContext, JobError, NewJob, Runtime, RuntimeConfig, RuntimeHandle, SystemClock,
    TestClock, Worker, Workers,
};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// The probe's arguments.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Probe {
    /// A label recorded with the run (the group, say).
    pub label: String,
    /// How long the handler sleeps.
    pub sleep_ms: u64,
}

impl JobArgs for Probe {
    const KIND: &'static str = "probe";
}

/// One run of a probe job.
#[derive(Debug, Clone)]
pub struct Run {
    pub label: String,
    pub queue: String,
    pub started: Instant,
    pub ended: Instant,
}

/// What the probe workers of every runtime saw.
#[derive(Debug, Default, Clone)]
pub struct Log {
    runs: Arc<Mutex<Vec<Run>>>,
}

impl Log {
    pub fn runs(&self) -> Vec<Run> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn len(&self) -> usize {
        self.runs.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// A log of the runs that match `keep`.
    pub fn filtered(&self, keep: impl Fn(&Run) -> bool) -> Log {
        let runs = self.runs().into_iter().filter(|r| keep(r)).collect();
        Log {
            runs: Arc::new(Mutex::new(runs)),
        }
    }

    /// The most runs that overlapped in time.
    pub fn max_overlap(&self) -> usize {
        let mut events: Vec<(Instant, i32)> = Vec::new();
        for run in self.runs() {
            events.push((run.started, 1));
            events.push((run.ended, -1));
        }
        // Ends sort before starts at the same instant: touching runs do not overlap.
        events.sort();
        let (mut now, mut max) = (0i32, 0i32);
        for (_, d) in events {
            now += d;
            max = max.max(now);
        }
        usize::try_from(max).unwrap_or(0)
    }

    /// Waits (checking every 5 ms) until `done` holds, or fails after `limit`.
    pub async fn wait_until(
        &self,
        limit: Duration,
        done: impl Fn(&[Run]) -> bool,
    ) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            if done(&self.runs()) {
                return Ok(());
            }
            anyhow::ensure!(
                start.elapsed() < limit,
                "not done within {limit:?} ({} runs)",
                self.len()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

struct ProbeWorker(Log);

#[async_trait::async_trait]
impl Worker for ProbeWorker {
    type Args = Probe;
    async fn process(&self, ctx: &JobContext, args: Probe) -> Result<(), JobError> {
        let started = Instant::now();
        if args.sleep_ms > 0 {
            tokio::time::sleep(Duration::from_millis(args.sleep_ms)).await;
        }
        let run = Run {
            label: args.label,
            queue: ctx.queue().to_owned(),
            started,
            ended: Instant::now(),
        };
        self.0
            .runs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(run);
        Ok(())
    }
}

/// A probe job.
pub fn probe(queue: &str, label: &str, sleep_ms: u64) -> NewJob {
    NewJob::of(&Probe {
        label: label.to_owned(),
        sleep_ms,
    })
    .expect("encodes")
    .with_queue(queue)
}

/// Another backend on the schema of `db`: another node.
pub async fn node(db: &TestDatabase) -> anyhow::Result<Arc<dyn Backend>> {
    Ok(Arc::new(
        db.backend_with_clock(Arc::new(SystemClock)).await?,
    ))
}

/// Starts a runtime running probes on its own backend.
pub async fn start(
    db: &TestDatabase,
    log: &Log,
    config: RuntimeConfig,
) -> anyhow::Result<RuntimeHandle> {
    run_probes(node(db).await?, log, config).await
}

/// Starts a runtime running probes on its own backend, both on `clock`.
pub async fn start_on(
    db: &TestDatabase,
    log: &Log,
    config: RuntimeConfig,
    clock: &TestClock,
) -> anyhow::Result<RuntimeHandle> {
    let backend = Arc::new(db.backend_with_clock(Arc::new(clock.clone())).await?);
    run_probes(backend, log, config.with_clock(Arc::new(clock.clone()))).await
}

async fn run_probes(
    backend: Arc<dyn Backend>,
    log: &Log,
    config: RuntimeConfig,
) -> anyhow::Result<RuntimeHandle> {
    let mut workers = Workers::new();
    workers.register(ProbeWorker(log.clone()));
    Ok(Runtime::new(backend, workers, config).start().await?)
}

/// A runtime configuration for `queues` with `concurrency` slots.
pub fn config(queues: &[&str], concurrency: usize) -> RuntimeConfig {
    RuntimeConfig::default()
        .with_queues(queues.iter().copied())
        .with_concurrency(concurrency)
        .with_poll_interval(Duration::from_millis(200))
}
