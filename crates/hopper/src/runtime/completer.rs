//! The completer: writes outcomes in batches, off the handlers' path.
//!
//! Handlers hand their outcome to a channel and return; this task drains the channel and
//! writes everything waiting in one statement per kind of outcome. Under load batches grow
//! by themselves; when idle, each outcome is written at once. A failed write is retried
//! with backoff, never dropped: until it lands the job stays leased, and if the process
//! dies first, the lease expires and the job runs again (at-least-once).

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{Backend, Finish, FinishResult, JobState};
use tokio::sync::{Notify, mpsc};

/// One outcome to write. `expect_lost` marks a job already completed in the handler's own
/// transaction: a lost lease then is expected, not worth a warning.
#[derive(Debug)]
pub(crate) struct Pending {
    pub finish: Finish,
    pub expect_lost: bool,
}

/// Runs until every sender is dropped and the channel is drained.
///
/// `scheduled` is notified whenever an outcome put a job back in `scheduled` (a retry after
/// a backoff, a snooze), so the promoter can wake in time for a short backoff.
pub(crate) async fn run(
    backend: Arc<dyn Backend>,
    mut rx: mpsc::Receiver<Pending>,
    batch: usize,
    scheduled: Arc<Notify>,
) {
    let mut buffer: Vec<Pending> = Vec::with_capacity(batch);
    while let Some(first) = rx.recv().await {
        buffer.push(first);
        while buffer.len() < batch {
            match rx.try_recv() {
                Ok(p) => buffer.push(p),
                Err(_) => break,
            }
        }
        if write(&*backend, &buffer).await {
            scheduled.notify_one();
        }
        buffer.clear();
    }
}

/// Writes one batch, retrying until it lands. True if any job went back to `scheduled`.
async fn write(backend: &dyn Backend, pending: &[Pending]) -> bool {
    let finishes: Vec<Finish> = pending.iter().map(|p| p.finish.clone()).collect();
    let mut backoff = Duration::from_millis(50);
    loop {
        match backend.job_finish_many(&finishes).await {
            Ok(results) => {
                let scheduled = results.contains(&FinishResult::Recorded(JobState::Scheduled));
                for (p, result) in pending.iter().zip(results) {
                    if result == FinishResult::LeaseLost && !p.expect_lost {
                        tracing::warn!(
                            job_id = %p.finish.lease.job_id,
                            attempt = p.finish.lease.attempt,
                            "outcome discarded: lease lost (the job was re-claimed, cancelled or released)"
                        );
                    }
                }
                return scheduled;
            }
            Err(e) => {
                tracing::warn!(error = %e, jobs = finishes.len(), retry_in = ?backoff, "writing outcomes failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}
