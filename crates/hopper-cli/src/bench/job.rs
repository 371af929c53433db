//! The bench job and its worker: a no-op, or a sleep of `--work-ms`, writing
//! `--log-lines` lines to its per-job log; for W4 it also records how long after its
//! enqueue it started.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper::{JobArgs, JobContext, JobError, LogLevel, NewJob, Worker};
use serde::{Deserialize, Serialize};

use super::QUEUE;

/// The arguments of a bench job: `{"n": i}`, plus the enqueue time for W4.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchJob {
    /// Its number in the workload.
    pub n: u64,
    /// When it was enqueued, in microseconds since the Unix epoch (W4 only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_us: Option<i64>,
}

impl JobArgs for BenchJob {
    const KIND: &'static str = "bench";
}

impl BenchJob {
    /// Job number `n` on the bench queue.
    pub fn new_job(n: u64, t_us: Option<i64>) -> NewJob {
        let args = match t_us {
            Some(t) => serde_json::json!({ "n": n, "t_us": t }),
            None => serde_json::json!({ "n": n }),
        };
        NewJob::new(Self::KIND, args).with_queue(QUEUE)
    }
}

/// Microseconds since the Unix epoch, by this machine's clock.
pub fn now_us() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

/// Runs bench jobs.
#[derive(Debug, Clone, Default)]
pub struct BenchWorker {
    /// Each job sleeps this long.
    pub work: Duration,
    /// Overrides the stored timeout of the jobs it runs.
    pub timeout: Option<Duration>,
    /// Where W4 records each job's enqueue→start latency (ms).
    pub latencies: Option<Arc<Latencies>>,
    /// Lines each job writes to its log (stored before its outcome is reported).
    pub log_lines: u32,
}

/// Latencies recorded by the handlers, and a signal for each new one.
#[derive(Debug, Default)]
pub struct Latencies {
    samples: Mutex<Vec<f64>>,
    /// Notified after each sample.
    pub recorded: tokio::sync::Notify,
}

impl Latencies {
    /// Adds one sample.
    pub fn push(&self, ms: f64) {
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ms);
        self.recorded.notify_one();
    }

    /// How many samples so far.
    pub fn len(&self) -> usize {
        self.samples.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Every sample so far.
    pub fn take(&self) -> Vec<f64> {
        std::mem::take(&mut *self.samples.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[async_trait::async_trait]
impl Worker for BenchWorker {
    type Args = BenchJob;

    async fn process(&self, ctx: &JobContext, args: BenchJob) -> Result<(), JobError> {
        if let (Some(latencies), Some(t_us)) = (&self.latencies, args.t_us) {
            latencies.push((now_us() - t_us) as f64 / 1000.0);
        }
        for i in 0..self.log_lines {
            let message = format!("bench job {} line {i}", args.n);
            ctx.log(LogLevel::Info, message, serde_json::Map::new());
        }
        if !self.work.is_zero() {
            tokio::time::sleep(self.work).await;
        }
        Ok(())
    }

    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
}
