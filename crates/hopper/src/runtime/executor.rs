//! The executor: runs one claimed job to an outcome.
//!
//! It enforces the timeout (which [`crate::JobContext::extend`] can move), turns panics
//! into failed attempts, honours cancellation, and hands the outcome to the completer.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use hopper_core::{ClaimedJob, Finish, Outcome};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tracing::Instrument;

use super::completer::Pending;
use super::{Running, Shared};
use crate::context::{JobContext, RunState, StopReason};
use crate::metrics::{self, AttemptEnd};
use crate::registry::ErasedWorker;
use crate::worker::JobError;

/// Runs `job` while holding one concurrency slot (`permit`).
pub(crate) async fn run_job(shared: Arc<Shared>, job: ClaimedJob, permit: OwnedSemaphorePermit) {
    let span = tracing::info_span!(
        "job",
        job_id = %job.lease.job_id,
        queue = %job.queue,
        kind = %job.kind,
        attempt = job.lease.attempt,
    );
    async move {
        let lease = job.lease;
        let (queue, kind) = (job.queue.clone(), job.kind.clone());
        let last_attempt = job.counted_attempt >= job.max_attempts;
        // Wall-clock time, for a metric only: how long after it was due the job started.
        let latency = (chrono::Utc::now() - job.run_at)
            .to_std()
            .unwrap_or_default();
        metrics::started(&queue, &kind, latency);
        let worker = shared.workers.get(&job.kind);
        let timeout = worker
            .as_ref()
            .and_then(|w| w.timeout())
            .unwrap_or(job.timeout);
        let started = Instant::now();
        let run = Arc::new(RunState::new(started + timeout));
        shared.running_insert(
            lease.job_id,
            Running {
                lease,
                run: run.clone(),
                renewed: started,
            },
        );

        // The claim leased the job for min(stored timeout, lease). A worker whose own
        // timeout is longer must hold the job longer than that, or a rescuer takes it back
        // mid-run and it runs twice; heartbeats only renew leases well before `lease`.
        let needed = timeout.min(shared.config.lease);
        if needed > job.timeout.min(shared.config.lease) {
            match shared.backend.job_extend_many(&[lease], needed).await {
                Ok(lost) if !lost.is_empty() => run.stop(StopReason::LeaseLost),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "extending the lease to the worker's timeout failed")
                }
            }
        }

        let outcome = match worker {
            None => Some(Outcome::Retry {
                error: format!(
                    "no worker for kind {:?} is registered on node {} ({}); it knows {:?}",
                    job.kind,
                    shared.node.id,
                    shared.node.name,
                    shared.workers.kinds().collect::<Vec<_>>()
                ),
                retry_in: crate::worker::default_backoff(job.counted_attempt),
                duration_ms: 0,
            }),
            Some(worker) => {
                let job = Arc::new(job);
                let ctx = JobContext::new(
                    job.clone(),
                    run.clone(),
                    shared.backend.clone(),
                    shared.blocking.clone(),
                );
                let handler = AssertUnwindSafe(worker.process(&ctx, &job.args)).catch_unwind();
                tokio::pin!(handler);
                let result = loop {
                    let deadline = *run.deadline.lock().await;
                    tokio::select! {
                        // The handler first: one that watches its token reacts in the poll
                        // that sees it fire, and its reaction runs; one that does not is
                        // dropped by the next branch.
                        biased;
                        r = &mut handler => break Some(r),
                        _ = run.token.cancelled() => break None,
                        _ = tokio::time::sleep_until(deadline) => {
                            if *run.deadline.lock().await <= Instant::now() {
                                run.token.cancel();
                                break Some(Ok(Err(JobError::retry(format!(
                                    "timed out after {:?}", deadline - started
                                )))));
                            }
                        }
                    }
                };
                let ran = started.elapsed();
                shared.pace.record(ran);
                let duration_ms = i64::try_from(ran.as_millis()).unwrap_or(i64::MAX);
                // A stopped run ends by its reason, whatever a handler that reacted to its
                // token returned: a shutdown hands the job back without penalty (unless the
                // work got done), and a cancelled or lost job is no longer ours to report on.
                let result = match (run.reason(), result) {
                    (StopReason::None, result) => result,
                    (StopReason::Shutdown, Some(Ok(Ok(())))) => Some(Ok(Ok(()))),
                    (_, _) => None,
                };
                match result {
                    None => match run.reason() {
                        StopReason::Shutdown => Some(Outcome::Released),
                        // Cancelled or lease lost: the job is no longer ours to report on.
                        _ => None,
                    },
                    Some(Ok(result)) => {
                        Some(outcome(result, &*worker, job.counted_attempt, duration_ms))
                    }
                    Some(Err(panic)) => Some(outcome(
                        Err(JobError::retry(format!(
                            "panicked: {}",
                            panic_message(&*panic)
                        ))),
                        &*worker,
                        job.counted_attempt,
                        duration_ms,
                    )),
                }
            }
        };
        shared.running_remove(lease.job_id);
        if let Some(outcome) = &outcome {
            record_end(&queue, &kind, outcome, last_attempt);
        }
        if let Some(outcome) = outcome {
            match &outcome {
                Outcome::Retry { error, .. } | Outcome::Failed { error, .. } => {
                    tracing::info!(%error, "attempt failed");
                }
                _ => {}
            }
            let expect_lost = run
                .completed_in_tx
                .load(std::sync::atomic::Ordering::SeqCst);
            let pending = Pending {
                finish: Finish { lease, outcome },
                expect_lost,
            };
            if shared.completer.send(pending).await.is_err() {
                tracing::error!("completer stopped; the outcome is lost and the lease will expire");
            }
        }
        drop(permit);
    }
    .instrument(span)
    .await
}

/// Counts how an attempt ended, as the handler reported it (before the completer knows
/// whether the lease still held).
fn record_end(queue: &str, kind: &str, outcome: &Outcome, last_attempt: bool) {
    let (end, duration_ms) = match *outcome {
        Outcome::Completed { duration_ms } => (AttemptEnd::Completed, duration_ms),
        Outcome::Retry { duration_ms, .. } if last_attempt => (AttemptEnd::Failed, duration_ms),
        Outcome::Retry { duration_ms, .. } => (AttemptEnd::Retried, duration_ms),
        Outcome::Failed { duration_ms, .. } => (AttemptEnd::Failed, duration_ms),
        Outcome::Snoozed { .. } | Outcome::Released => return,
    };
    let ran = Duration::from_millis(u64::try_from(duration_ms).unwrap_or(0));
    metrics::finished(queue, kind, end, ran);
}

/// The text of a handler's panic payload.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}

/// The outcome a handler's result stands for: a retry without its own delay takes the
/// worker's backoff for `attempt`. Shared with `testing::run_job`, which reports what the
/// runtime would.
pub(crate) fn outcome(
    result: std::result::Result<(), JobError>,
    worker: &dyn ErasedWorker,
    attempt: i32,
    duration_ms: i64,
) -> Outcome {
    match result {
        Ok(()) => Outcome::Completed { duration_ms },
        Err(JobError::Retry { message, retry_in }) => Outcome::Retry {
            error: message,
            retry_in: retry_in.unwrap_or_else(|| worker.backoff(attempt)),
            duration_ms,
        },
        Err(JobError::Permanent(message)) => Outcome::Failed {
            error: message,
            duration_ms,
        },
        Err(JobError::Snooze(retry_in)) => Outcome::Snoozed { retry_in },
    }
}
