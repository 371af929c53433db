//! The promoter: scheduled jobs become available when they are due.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use hopper_core::backend::{Backend, JobPromoteOutcome};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{Service, maintenance_or_stop, ride_out};
use crate::spans;

/// How long the [`Promoter`] may sleep. [`PromoterConfig::default`] gives the documented
/// default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PromoterConfig {
    /// Longest wait between two promotions, however far off the next scheduled job is (a
    /// job scheduled meanwhile by another node is seen within it). Default: 1 s.
    pub poll_interval: Duration,
}

impl Default for PromoterConfig {
    fn default() -> Self {
        PromoterConfig {
            poll_interval: Duration::from_secs(1),
        }
    }
}

impl PromoterConfig {
    /// The defaults with `poll_interval`.
    pub fn new(poll_interval: Duration) -> Self {
        PromoterConfig { poll_interval }
    }
}

/// Makes scheduled jobs available when due, sleeping until the next one (at most
/// [`PromoterConfig::poll_interval`]), or until woken ([`Promoter::woken_by`]).
#[derive(Debug, Clone)]
pub struct Promoter {
    backend: Arc<dyn Backend>,
    config: PromoterConfig,
    wake: Arc<Notify>,
}

impl Promoter {
    /// A promoter of `backend`'s scheduled jobs.
    pub fn new(backend: Arc<dyn Backend>, config: PromoterConfig) -> Self {
        Promoter {
            backend,
            config,
            wake: Arc::new(Notify::new()),
        }
    }

    /// Promotes at once whenever `wake` is notified (this node just scheduled a job, such
    /// as a retry with a short backoff), rather than at the end of the current wait.
    pub fn woken_by(mut self, wake: Arc<Notify>) -> Self {
        self.wake = wake;
        self
    }

    async fn run_until(&self, stop: CancellationToken) -> crate::Result<()> {
        let Some(store) = maintenance_or_stop(&*self.backend, "promoter") else {
            return Ok(());
        };
        let poll = self.config.poll_interval;
        let mut wait = Duration::ZERO;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.wake.notified() => {}
                _ = stop.cancelled() => return Ok(()),
            }
            // The database away is ridden out; anything else (a missing table, a privilege
            // revoked) ends this run, for the supervisor (see `ride_out`).
            let promote = || {
                spans::seam(spans::promote(), store.job_promote_scheduled(), |o| {
                    Some(o.promoted)
                })
            };
            let Some(outcome) = ride_out("promoting scheduled jobs", &stop, promote).await? else {
                return Ok(());
            };
            wait = match outcome {
                JobPromoteOutcome {
                    next_due: Some(next),
                    ..
                } => {
                    let until = (next - chrono::Utc::now())
                        .to_std()
                        .unwrap_or(Duration::ZERO);
                    until.min(poll) + Duration::from_millis(1)
                }
                JobPromoteOutcome { next_due: None, .. } => poll,
            };
        }
    }
}

impl Service for Promoter {
    fn name(&self) -> &'static str {
        "promoter"
    }

    fn run(self: Arc<Self>, stop: CancellationToken) -> BoxFuture<'static, crate::Result<()>> {
        Box::pin(async move { self.run_until(stop).await })
    }
}
