//! The heartbeat: the node says it is alive, every period.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::{Service, ride_out, tick};

/// What a node does at each heartbeat: at least refresh its node row
/// ([`hopper_core::Backend::node_heartbeat`]); a worker runtime also renews the leases of
/// the jobs it runs.
#[async_trait::async_trait]
pub trait Beat: Send + Sync + 'static {
    /// One heartbeat. An error is handled by the rule of every service (see the
    /// [module docs](super)): a transient one is retried with backoff, any other ends the
    /// [`Heartbeat`]'s run, for its supervisor.
    async fn beat(&self) -> crate::Result<()>;
}

/// How often the [`Heartbeat`] beats. [`HeartbeatConfig::default`] gives the documented
/// default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeartbeatConfig {
    /// The time between two beats. Default: 5 s.
    pub period: Duration,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        HeartbeatConfig {
            period: Duration::from_secs(5),
        }
    }
}

impl HeartbeatConfig {
    /// The defaults with `period`.
    pub fn new(period: Duration) -> Self {
        HeartbeatConfig { period }
    }
}

/// Calls its [`Beat`] every [`HeartbeatConfig::period`].
pub struct Heartbeat {
    beat: Arc<dyn Beat>,
    config: HeartbeatConfig,
}

impl std::fmt::Debug for Heartbeat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Heartbeat")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Heartbeat {
    /// A heartbeat doing `beat`.
    pub fn new(beat: Arc<dyn Beat>, config: HeartbeatConfig) -> Self {
        Heartbeat { beat, config }
    }
}

impl Service for Heartbeat {
    fn name(&self) -> &'static str {
        "heartbeat"
    }

    fn run(self: Arc<Self>, stop: CancellationToken) -> BoxFuture<'static, crate::Result<()>> {
        Box::pin(async move {
            while tick(&stop, self.config.period).await {
                let beat = || self.beat.beat();
                if ride_out("the node heartbeat", &stop, beat).await?.is_none() {
                    break;
                }
            }
            Ok(())
        })
    }
}
