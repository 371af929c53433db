//! The runtime's own services, in the shape of [`crate::maintenance`] and started beside
//! its rescuer, promoter, pruner and vacuumer:
//!
//! - the heartbeat's [`Beat`]: keeps the node registered and renews the leases of running
//!   jobs, unless the node is fenced;
//! - what its listener does with wake-ups: producer wake-ups and cancellations;
//! - the periodic enqueuer, when periodic jobs are registered.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures_util::future::BoxFuture;
use hopper_core::backend::{Backend, JobExtendManyParams, Wakeup};
use hopper_core::{Clock, Error, Lease};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Shared;
use crate::context::StopReason;
use crate::maintenance::{Beat, NodeRow, OnWakeup, Service};

/// The runtime's heartbeat: the node row (never waited on for long: [`NodeRow`]), then the
/// leases due for renewal.
pub(crate) struct NodeBeat {
    pub(crate) shared: Arc<Shared>,
    pub(crate) row: NodeRow,
}

#[async_trait::async_trait]
impl Beat for NodeBeat {
    async fn beat(&self) -> crate::Result<()> {
        let shared = &self.shared;
        // A fenced node does not say it is alive: it may have been released.
        if shared.fenced.load(Ordering::Acquire) {
            return Ok(());
        }
        self.row.refresh(&shared.backend, &shared.node).await?;
        let due: Vec<_> = shared.running_due_for_renewal(shared.config.effective_heartbeat());
        renew(shared, &due).await
    }
}

/// Extends the leases of `due` running jobs, and stops the handlers of those lost.
pub(super) async fn renew(shared: &Shared, due: &[Lease]) -> crate::Result<()> {
    if due.is_empty() {
        return Ok(());
    }
    let params = JobExtendManyParams {
        leases: due.to_vec(),
        by: shared.config.lease,
    };
    match crate::spans::extend_leases(&*shared.backend, &params).await {
        Ok(lost) => {
            shared.running_renewed(due, Instant::now());
            for lease in lost {
                tracing::warn!(job_id = %lease.job_id, attempt = lease.attempt, "lease lost; stopping the handler");
                shared.running_stop(lease.job_id, StopReason::LeaseLost);
            }
            Ok(())
        }
        Err(e) => {
            tracing::debug!(error = %e.with_causes(), jobs = due.len(), "renewing leases failed");
            Err(e)
        }
    }
}

/// Turns wake-ups into producer wake-ups and cancellations of running jobs.
pub(crate) struct NodeWakeups(pub(crate) Arc<Shared>);

#[async_trait::async_trait]
impl OnWakeup for NodeWakeups {
    async fn wakeup(&self, wakeup: Wakeup) -> bool {
        let shared = &self.0;
        match wakeup {
            Wakeup::Jobs(queue) => {
                if shared.config.queues.contains(&queue) {
                    shared.wake.notify_one();
                }
            }
            Wakeup::Cancelled(id) => shared.running_stop(id, StopReason::Cancelled),
            Wakeup::Resync => shared.wake.notify_one(),
        }
        true
    }

    async fn unsubscribed(&self, error: &Error) {
        tracing::warn!(error = %error, "subscribing to wake-ups failed; polling meanwhile");
    }
}

/// Enqueues the ticks of the registered periodic jobs.
pub(crate) struct Periodic {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) jobs: Vec<crate::PeriodicJob>,
    /// The runtime's middleware: their enqueue side runs on every tick's jobs.
    pub(crate) middleware: crate::middleware::Chain,
}

impl Service for Periodic {
    fn name(&self) -> &'static str {
        "periodic"
    }

    fn run(self: Arc<Self>, stop: CancellationToken) -> BoxFuture<'static, crate::Result<()>> {
        let (backend, clock) = (self.backend.clone(), self.clock.clone());
        let (jobs, middleware) = (self.jobs.clone(), self.middleware.clone());
        Box::pin(async move {
            crate::periodic::run(backend, clock, jobs, middleware, stop).await;
            Ok(())
        })
    }
}
