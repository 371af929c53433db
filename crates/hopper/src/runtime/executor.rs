//! The executor: runs one claimed job to an outcome, with the steps of [`super::handler`]
//! (timeout, panics, cancellation), while holding a concurrency slot; records its metrics
//! and hands the outcome to the completer.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::{ClaimedJob, Finish, Outcome};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tracing::Instrument;

use super::completer::Pending;
use super::handler;
use super::{Running, Shared};
use crate::context::{JobContext, RunState, StopReason};
use crate::metrics::{self, AttemptEnd};
use crate::middleware;

/// Runs `job` while holding one concurrency slot (`permit`).
pub(crate) async fn run_job(shared: Arc<Shared>, job: ClaimedJob, permit: OwnedSemaphorePermit) {
    let span = crate::spans::job(&job);
    let chain = shared.workers.chain();
    chain.attempt_span(&job, &span);
    let scopes = chain.attempt(&job);
    let started = Instant::now();
    let lease = job.lease;
    let (queue, kind) = (job.queue.clone(), job.kind.clone());
    let last_attempt = job.counted_attempt >= job.max_attempts;
    // Boxed: the attempt's future is large (the handler's, the log's, the lease's), and
    // unboxed it is copied whole at each step of its construction (memmove, twice the
    // share of W3's CPU; docs/benchmarks.md).
    let attempt = Box::pin(attempt(&shared, job, started));
    let (outcome, expect_lost) = middleware::within(&scopes, attempt)
        .instrument(span.clone())
        .await;
    let ran = started.elapsed();
    crate::spans::job_end(&span, outcome.as_ref(), ran);
    middleware::end_scopes(scopes, outcome.as_ref(), ran);
    async move {
        let Some(outcome) = outcome else {
            return;
        };
        record_end(&queue, &kind, &outcome, last_attempt);
        if let Outcome::Retry { error, .. } | Outcome::Failed { error, .. } = &outcome {
            tracing::info!(%error, "attempt failed");
        }
        let pending = Pending {
            finish: Finish { lease, outcome },
            expect_lost,
        };
        if shared.completer.send(pending).await.is_err() {
            // An abandoned handler's, after its runtime stopped: the node's deregistration
            // released its job (or, if that failed, the release of dead nodes will).
            tracing::error!(
                "the runtime stopped before this outcome was queued; it is not written, and the job runs again"
            );
        }
    }
    .instrument(span)
    .await;
    drop(permit);
}

/// Runs one attempt of `job`, started at `started`, to its outcome (`None`: dropped,
/// nothing to report), and whether the handler completed it inside its own transaction
/// (its lease is then expected to be gone).
async fn attempt(shared: &Shared, job: ClaimedJob, started: Instant) -> (Option<Outcome>, bool) {
    let lease = job.lease;
    // Wall-clock time, for a metric only: how long after it was due the job started.
    let latency = (chrono::Utc::now() - job.run_at)
        .to_std()
        .unwrap_or_default();
    metrics::started(&job.queue, &job.kind, latency);
    let worker = shared.workers.get(&job.kind);
    let timeout = worker
        .as_ref()
        .and_then(|w| w.timeout())
        .unwrap_or(job.timeout);
    let run = Arc::new(RunState::new(started + timeout));
    let _running = RunningEntry::insert(
        shared,
        Running {
            lease,
            run: run.clone(),
            renewed: started,
        },
    );

    match handler::hold_for_timeout(&*shared.backend, &job, timeout, shared.config.lease).await {
        Ok(true) => {}
        Ok(false) => run.stop(StopReason::LeaseLost),
        Err(e) => {
            tracing::warn!(error = %e.with_causes(), "extending the lease to the worker's timeout failed")
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
            // The log is stored beside the handler, as it runs; its last lines once
            // the handler returned, before the outcome is reported. The attempt's
            // duration is the handler's; its slot's (the pace) includes that store.
            let ((end, ran), ()) = tokio::join!(
                async {
                    let end = handler::drive(
                        &*worker,
                        shared.workers.chain(),
                        &ctx,
                        &job.args,
                        &run,
                        started,
                    )
                    .await;
                    let ran = started.elapsed();
                    ctx.close_logs();
                    (end, ran)
                },
                ctx.write_logs()
            );
            shared.pace.record(started.elapsed());
            handler::settled_outcome(
                handler::settle(run.reason(), end),
                &*worker,
                job.counted_attempt,
                handler::millis(ran),
            )
        }
    };
    let expect_lost = run
        .completed_in_tx
        .load(std::sync::atomic::Ordering::SeqCst);
    (outcome, expect_lost)
}

/// A job's entry among the node's running jobs, whose leases its heartbeat renews: removed
/// when dropped, so that a panic in the attempt (a worker's own code outside its handler)
/// cannot leave the lease renewed for as long as the node lives.
struct RunningEntry<'a> {
    shared: &'a Shared,
    id: hopper_core::JobId,
}

impl<'a> RunningEntry<'a> {
    fn insert(shared: &'a Shared, running: Running) -> Self {
        let id = running.lease.job_id;
        shared.running_insert(id, running);
        RunningEntry { shared, id }
    }
}

impl Drop for RunningEntry<'_> {
    fn drop(&mut self) {
        self.shared.running_remove(self.id);
    }
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
