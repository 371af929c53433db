//! The demo's job and worker: sleep 100 ms, and fail for good on every job whose number is
//! a multiple of 12.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hopper::{JobArgs, JobContext, JobError, Worker};
use serde::{Deserialize, Serialize};

/// How long each demo job works.
pub const WORK: Duration = Duration::from_millis(100);

/// Every job whose number is a multiple of this fails on every attempt.
pub const FAIL_EVERY: u32 = 12;

/// One demo job: its number, from 1.
#[derive(Debug, Serialize, Deserialize)]
pub struct DemoJob {
    /// The job's number.
    pub n: u32,
}

impl JobArgs for DemoJob {
    const KIND: &'static str = "demo.sleep";
}

/// Sleeps [`WORK`], then succeeds, unless the job's number is a multiple of [`FAIL_EVERY`].
///
/// Counts the jobs it is running, for the progress bar: the database's `running` count
/// also holds the jobs the runtime claimed ahead of its free slots (its prefetch), which
/// are not running yet.
#[derive(Debug, Default)]
pub struct DemoWorker {
    running: Arc<AtomicUsize>,
}

impl DemoWorker {
    /// A shared count of the jobs running right now.
    pub fn running(&self) -> Arc<AtomicUsize> {
        self.running.clone()
    }
}

/// Decrements the running count however the job ends.
struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[async_trait::async_trait]
impl Worker for DemoWorker {
    type Args = DemoJob;

    async fn process(&self, _ctx: &JobContext, job: DemoJob) -> Result<(), JobError> {
        self.running.fetch_add(1, Ordering::Relaxed);
        let _running = Running(self.running.clone());
        tokio::time::sleep(WORK).await;
        if job.n.is_multiple_of(FAIL_EVERY) {
            return Err(JobError::retry(format!(
                "demo job {} fails on every attempt (a multiple of {FAIL_EVERY})",
                job.n
            )));
        }
        Ok(())
    }

    /// A short backoff (30 ms, then 50 ms), so the demo's retries show within seconds.
    fn backoff(&self, attempt: i32) -> Duration {
        let attempt = u64::try_from(attempt.clamp(1, 2)).unwrap_or(1);
        Duration::from_millis(10 + 20 * attempt)
    }
}
