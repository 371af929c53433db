//! The rescuer: jobs whose lease expired, and the jobs of dead or vanished nodes, go back
//! to their queue.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use hopper_core::backend::{Backend, NodeReleaseDeadParams};
use hopper_core::liveness::VANISHED_CHECK_PERIOD;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Service, ride_out, tick};
use crate::spans;

/// How often the [`Rescuer`] looks, and when a node counts as dead.
/// [`RescuerConfig::default`] gives the documented defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RescuerConfig {
    /// How often expired leases and dead nodes are looked for. Default: 1 s.
    pub interval: Duration,
    /// A node silent this long is dead and its jobs are released. Default: 30 s.
    pub node_dead_after: Duration,
}

impl Default for RescuerConfig {
    fn default() -> Self {
        RescuerConfig {
            interval: Duration::from_secs(1),
            node_dead_after: Duration::from_secs(30),
        }
    }
}

impl RescuerConfig {
    /// The defaults with `interval` and `node_dead_after`.
    pub fn new(interval: Duration, node_dead_after: Duration) -> Self {
        RescuerConfig {
            interval,
            node_dead_after,
        }
    }
}

/// Every [`RescuerConfig::interval`], takes back expired leases and the jobs of nodes
/// silent for [`RescuerConfig::node_dead_after`]. Where the backend tracks node liveness,
/// it also looks every [`VANISHED_CHECK_PERIOD`] for nodes whose liveness lock went free
/// and releases their jobs at once.
#[derive(Debug, Clone)]
pub struct Rescuer {
    backend: Arc<dyn Backend>,
    config: RescuerConfig,
}

impl Rescuer {
    /// A rescuer of `backend`'s jobs.
    pub fn new(backend: Arc<dyn Backend>, config: RescuerConfig) -> Self {
        Rescuer { backend, config }
    }

    async fn run_until(&self, stop: CancellationToken) -> crate::Result<()> {
        let interval = self.config.interval;
        let period = if self.backend.node_liveness().is_some() {
            interval.min(VANISHED_CHECK_PERIOD)
        } else {
            interval
        };
        // A backend without `MaintenanceStore` (the remote transport: its server does
        // this) leaves only the liveness check, if any.
        let store = self.backend.maintenance();
        if store.is_none() && self.backend.node_liveness().is_none() {
            return Ok(());
        }
        let release_dead = NodeReleaseDeadParams {
            dead_after: self.config.node_dead_after,
        };
        let mut last_rescue = Instant::now();
        // Each step rides out the database being away and ends the run on anything else
        // (`ride_out`); `None` is the stop token.
        while tick(&stop, period).await {
            if let Some(liveness) = self.backend.node_liveness() {
                let release = || liveness.node_release_vanished();
                match ride_out("releasing vanished nodes", &stop, release).await? {
                    None => return Ok(()),
                    Some(0) => {}
                    Some(n) => tracing::info!(jobs = n, "released the jobs of vanished nodes"),
                }
            }
            if last_rescue.elapsed() + period / 2 < interval {
                continue;
            }
            last_rescue = Instant::now();
            let Some(store) = store else {
                continue;
            };
            let rescue =
                || spans::seam(spans::rescue(), store.job_rescue_expired(), spans::counted);
            match ride_out("rescuing expired leases", &stop, rescue).await? {
                None => return Ok(()),
                Some(0) => {}
                Some(n) => tracing::info!(jobs = n, "rescued jobs whose lease expired"),
            }
            let release = || {
                let release = store.node_release_dead(&release_dead);
                spans::seam(spans::release_dead(), release, spans::counted)
            };
            match ride_out("releasing dead nodes", &stop, release).await? {
                None => return Ok(()),
                Some(0) => {}
                Some(n) => tracing::info!(jobs = n, "released the jobs of dead nodes"),
            }
        }
        Ok(())
    }
}

impl Service for Rescuer {
    fn name(&self) -> &'static str {
        "rescuer"
    }

    fn run(self: Arc<Self>, stop: CancellationToken) -> BoxFuture<'static, crate::Result<()>> {
        Box::pin(async move { self.run_until(stop).await })
    }
}
