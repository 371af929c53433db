//! Keeping the job table small and fast: retention (deleting finished jobs once their time
//! is up) and vacuuming (clearing the dead row versions that every claim and outcome
//! leaves). Every worker runtime runs both loops, and so does `hopper serve`, whose remote
//! workers have no database connection of their own: a deployment of only remote workers
//! keeps its history bounded and its claim index clean as well.
//!
//! Both services run on every node and elect one at a time per statement (an advisory
//! lock), so several nodes only share the work.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use hopper_core::backend::{Backend, JobPruneParams, JobVacuumParams};
use hopper_core::limits::{check_count, check_duration, check_interval};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Service, maintenance_or_stop, ride_out, tick};
use crate::spans;

/// When finished jobs are deleted and the job table vacuumed: the config of [`Pruner`] and
/// [`Vacuumer`].
/// [`Housekeeping::default`] gives the documented defaults, the `with_*` methods change
/// them; `#[non_exhaustive]`, so a new setting is not a breaking change.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Housekeeping {
    /// How long `completed` and `cancelled` jobs are kept after they finished. Default:
    /// 24 h.
    pub completed_retention: Duration,
    /// How long `failed` (dead-lettered) jobs are kept after they finished, for inspection
    /// and retry. Default: 7 days.
    pub failed_retention: Duration,
    /// How often finished jobs past their retention are deleted; `None` turns pruning off
    /// on this node. Default: every 60 s.
    pub prune_interval: Option<Duration>,
    /// Most jobs deleted by one pruning statement. Default: 1,000.
    pub prune_batch: u32,
    /// The pause between two pruning statements of one pass, on top of three times as long
    /// as the last statement took, so a large backlog is deleted at a pace the hot path
    /// does not feel (measured in `docs/benchmarks.md`). Default: 20 ms.
    pub prune_pause: Duration,
    /// How often the node checks whether the job table needs a vacuum, which it then runs
    /// (see [`Backend::job_vacuum`]); `None` leaves it to the database's autovacuum.
    /// Default: every 10 s.
    pub vacuum_interval: Option<Duration>,
}

impl Default for Housekeeping {
    fn default() -> Self {
        Housekeeping {
            completed_retention: Duration::from_secs(24 * 3600),
            failed_retention: Duration::from_secs(7 * 24 * 3600),
            prune_interval: Some(Duration::from_secs(60)),
            prune_batch: 1000,
            prune_pause: Duration::from_millis(20),
            vacuum_interval: Some(Duration::from_secs(10)),
        }
    }
}

impl Housekeeping {
    /// With `completed` and `cancelled` jobs kept this long.
    pub fn with_completed_retention(self, completed_retention: Duration) -> Self {
        Housekeeping {
            completed_retention,
            ..self
        }
    }

    /// With `failed` jobs kept this long.
    pub fn with_failed_retention(self, failed_retention: Duration) -> Self {
        Housekeeping {
            failed_retention,
            ..self
        }
    }

    /// With pruning this often (`None`: no pruning on this node).
    pub fn with_prune_interval(self, prune_interval: Option<Duration>) -> Self {
        Housekeeping {
            prune_interval,
            ..self
        }
    }

    /// With at most `prune_batch` jobs deleted per statement.
    pub fn with_prune_batch(self, prune_batch: u32) -> Self {
        Housekeeping {
            prune_batch,
            ..self
        }
    }

    /// With this pause between two pruning statements.
    pub fn with_prune_pause(self, prune_pause: Duration) -> Self {
        Housekeeping {
            prune_pause,
            ..self
        }
    }

    /// With the vacuum check this often (`None`: leave it to autovacuum).
    pub fn with_vacuum_interval(self, vacuum_interval: Option<Duration>) -> Self {
        Housekeeping {
            vacuum_interval,
            ..self
        }
    }

    /// Refuses, with an [`hopper_core::Error::InvalidInput`] that names the setting, what
    /// the pruner and the vacuumer cannot run with (a runtime's and a server's own checks
    /// call it): a retention or `prune_pause` past [`hopper_core::limits::MAX_DURATION`]
    /// (ten years); a `prune_interval` or `vacuum_interval` of zero (the database queried
    /// without pause) or past it; a `prune_batch` past [`hopper_core::limits::MAX_COUNT`].
    /// A `prune_batch` of zero is read as one.
    pub fn check(&self) -> hopper_core::Result<()> {
        check_duration("completed_retention", self.completed_retention)?;
        check_duration("failed_retention", self.failed_retention)?;
        check_duration("prune_pause", self.prune_pause)?;
        if let Some(period) = self.prune_interval {
            check_interval("prune_interval", period)?;
        }
        if let Some(period) = self.vacuum_interval {
            check_interval("vacuum_interval", period)?;
        }
        let batch = usize::try_from(self.prune_batch).unwrap_or(usize::MAX);
        check_count("prune_batch", batch)?;
        Ok(())
    }

    /// One pruning statement's parameters.
    pub fn prune_params(&self) -> JobPruneParams {
        JobPruneParams {
            completed_retention: self.completed_retention,
            failed_retention: self.failed_retention,
            limit: self.prune_batch.max(1),
            dry_run: false,
            after: None,
        }
    }
}

/// Deletes the finished jobs past their retention, every
/// [`Housekeeping::prune_interval`]: one pass is statements of `prune_batch` jobs until one
/// comes back short (or another node holds the lock), with a pause between them. Stops at
/// once on a backend that offers no pruning, or when pruning is turned off.
#[derive(Debug, Clone)]
pub struct Pruner {
    backend: Arc<dyn Backend>,
    config: Housekeeping,
}

impl Pruner {
    /// A pruner of `backend`'s job table.
    pub fn new(backend: Arc<dyn Backend>, config: Housekeeping) -> Self {
        Pruner { backend, config }
    }

    async fn run_until(&self, stop: CancellationToken) -> crate::Result<()> {
        let Some(period) = self.config.prune_interval else {
            return Ok(());
        };
        let Some(store) = maintenance_or_stop(&*self.backend, "pruner") else {
            return Ok(());
        };
        while tick(&stop, period).await {
            let mut pruned = 0u64;
            // Each pass starts at the oldest job; each batch reads on past the last one.
            let mut params = self.config.prune_params();
            loop {
                let started = Instant::now();
                // The database away is ridden out; anything else ends the run (`ride_out`).
                let prune = || {
                    spans::seam(spans::prune(), store.job_prune(&params), |o| {
                        Some(o.total())
                    })
                };
                let Some(outcome) = ride_out("pruning finished jobs", &stop, prune).await? else {
                    return Ok(());
                };
                pruned += outcome.total();
                if !outcome.elected || outcome.total() < u64::from(params.limit) {
                    break;
                }
                params.after = outcome.last_id;
                let pause = self
                    .config
                    .prune_pause
                    .saturating_add(started.elapsed().saturating_mul(3));
                if !tick(&stop, pause).await {
                    return Ok(());
                }
            }
            if pruned > 0 {
                tracing::info!(jobs = pruned, "pruned finished jobs past their retention");
            }
        }
        Ok(())
    }
}

impl Service for Pruner {
    fn name(&self) -> &'static str {
        "pruner"
    }

    fn run(self: Arc<Self>, stop: CancellationToken) -> BoxFuture<'static, crate::Result<()>> {
        Box::pin(async move { self.run_until(stop).await })
    }
}

/// Vacuums the job table if dead row versions piled up (one node at a time), every
/// [`Housekeeping::vacuum_interval`], so claims stay fast where the database's autovacuum
/// is off or behind. Stops at once on a backend that has no such thing, or when it is
/// turned off.
#[derive(Debug, Clone)]
pub struct Vacuumer {
    backend: Arc<dyn Backend>,
    config: Housekeeping,
}

impl Vacuumer {
    /// A vacuumer of `backend`'s job table.
    pub fn new(backend: Arc<dyn Backend>, config: Housekeeping) -> Self {
        Vacuumer { backend, config }
    }

    async fn run_until(&self, stop: CancellationToken) -> crate::Result<()> {
        let Some(period) = self.config.vacuum_interval else {
            return Ok(());
        };
        let Some(store) = maintenance_or_stop(&*self.backend, "vacuumer") else {
            return Ok(());
        };
        let params = JobVacuumParams {
            min_interval: period,
        };
        while tick(&stop, period).await {
            let started = Instant::now();
            // The database away is ridden out; anything else ends the run (`ride_out`).
            let vacuum =
                || spans::seam(spans::vacuum(), store.job_vacuum(&params), spans::uncounted);
            match ride_out("vacuuming the job table", &stop, vacuum).await? {
                None => return Ok(()),
                Some(true) => {
                    tracing::debug!(took = ?started.elapsed(), "vacuumed the job table");
                }
                Some(false) => {}
            }
        }
        Ok(())
    }
}

impl Service for Vacuumer {
    fn name(&self) -> &'static str {
        "vacuumer"
    }

    fn run(self: Arc<Self>, stop: CancellationToken) -> BoxFuture<'static, crate::Result<()>> {
        Box::pin(async move { self.run_until(stop).await })
    }
}
