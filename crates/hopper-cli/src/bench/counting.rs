//! What W5 and W6 share: a no-op worker that counts the jobs it starts, notes when the
//! count passes given marks, and (W6) keeps each job's enqueue→start latency with its
//! start time — counted in the process, so the workloads need no database polls — the
//! runtime that runs it, and how their reports are printed.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::Context;
use hopper::{JobContext, JobError, Runtime, RuntimeHandle, Worker};
use serde::Serialize;

use super::Bench;
use super::drain::runtime_config;
use super::job::{BenchJob, now_us};

/// What the handlers have seen so far.
#[derive(Debug)]
pub struct Starts {
    started: AtomicU64,
    /// The counts whose moment is noted (ascending).
    marks: Vec<u64>,
    /// When each mark was passed.
    passed: Mutex<Vec<Option<Instant>>>,
    /// Signalled when the last mark is passed.
    pub done: tokio::sync::Notify,
    /// Signalled every `wake_every` starts (W5's feeder waits on it).
    pub wake: tokio::sync::Notify,
    wake_every: u64,
    /// `(seconds since origin, latency ms)` of each start, when keeping latencies.
    latencies: Option<Mutex<Vec<(f32, f32)>>>,
    origin: Instant,
}

impl Starts {
    /// Counts starts, noting the moments the count reaches each of `marks`, and waking
    /// [`Starts::wake`] every `wake_every` starts (0: never). With `keep_latencies`, every
    /// job's enqueue→start latency is kept with its start time.
    pub fn new(marks: Vec<u64>, wake_every: u64, keep_latencies: bool) -> Self {
        Starts {
            started: AtomicU64::new(0),
            passed: Mutex::new(vec![None; marks.len()]),
            marks,
            done: tokio::sync::Notify::new(),
            wake: tokio::sync::Notify::new(),
            wake_every,
            latencies: keep_latencies.then(|| Mutex::new(Vec::new())),
            origin: Instant::now(),
        }
    }

    /// Jobs started so far.
    pub fn started(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    /// When the count reached mark number `i`, if it has.
    pub fn passed(&self, i: usize) -> Option<Instant> {
        let passed = self.passed.lock().unwrap_or_else(|e| e.into_inner());
        passed.get(i).copied().flatten()
    }

    /// The `(seconds since creation, latency ms)` pairs kept so far, taken out.
    pub fn take_latencies(&self) -> Vec<(f32, f32)> {
        self.latencies.as_ref().map_or_else(Vec::new, |l| {
            std::mem::take(&mut *l.lock().unwrap_or_else(|e| e.into_inner()))
        })
    }

    /// The moment these counts were created (W6's clock origin).
    pub fn origin(&self) -> Instant {
        self.origin
    }

    fn record(&self, t_us: Option<i64>) {
        let now = Instant::now();
        let n = self.started.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(i) = self.marks.iter().position(|&m| m == n) {
            let mut passed = self.passed.lock().unwrap_or_else(|e| e.into_inner());
            passed[i] = Some(now);
            if i + 1 == self.marks.len() {
                self.done.notify_one();
            }
        }
        if self.wake_every > 0 && n.is_multiple_of(self.wake_every) {
            self.wake.notify_one();
        }
        if let (Some(latencies), Some(t)) = (&self.latencies, t_us) {
            // f32 keeps a 10-minute soak's samples small; µs precision is plenty.
            let ms = (now_us() - t) as f32 / 1000.0;
            let at = now.duration_since(self.origin).as_secs_f32();
            latencies
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((at, ms));
        }
    }
}

/// Runs bench jobs: counts each start in its [`Starts`], does nothing else.
#[derive(Debug, Clone)]
pub struct CountingWorker {
    /// Where the starts are counted.
    pub starts: std::sync::Arc<Starts>,
}

#[async_trait::async_trait]
impl Worker for CountingWorker {
    type Args = BenchJob;

    async fn process(&self, _ctx: &JobContext, args: BenchJob) -> Result<(), JobError> {
        self.starts.record(args.t_us);
        Ok(())
    }
}

/// Starts W3's runtime with a [`CountingWorker`] counting into `starts`.
pub async fn start(
    bench: &Bench,
    starts: &std::sync::Arc<Starts>,
) -> anyhow::Result<RuntimeHandle> {
    let mut workers = crate::telemetry::workers();
    workers.register(CountingWorker {
        starts: starts.clone(),
    });
    let runtime = Runtime::new(
        bench.client.backend().clone(),
        workers,
        runtime_config(bench),
    );
    runtime.start().await.context("starting the runtime")
}

/// Prints `report` as one JSON line with `--json`, else runs `text`.
pub fn print<T: Serialize>(bench: &Bench, report: &T, text: impl FnOnce()) {
    if !bench.json {
        text();
        return;
    }
    match serde_json::to_string(report) {
        Ok(line) => println!("{line}"),
        Err(e) => println!("{{\"error\":\"{e}\"}}"),
    }
}
