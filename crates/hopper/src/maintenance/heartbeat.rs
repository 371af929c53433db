//! The heartbeat: the node says it is alive, every period.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use hopper_core::{Backend, Error, NodeInfo};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
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

/// How long a beat waits for its node row's write before it goes on without it.
const NODE_ROW_WAIT: Duration = Duration::from_secs(1);

/// A node's row, refreshed at each beat ([`Backend::node_heartbeat`]) without the beat
/// waiting on it for more than a second: another transaction may hold the row (an admin's
/// `SELECT … FOR UPDATE` on `nodes`, a change left uncommitted), and a beat stuck behind it
/// would stop renewing the node's leases, so its running jobs would be taken back and run
/// twice. A write that does not finish in time goes on by itself, queued on the row, and no
/// other starts until it ends; the next beat after it reports its error, if any.
#[derive(Debug, Default)]
pub struct NodeRow {
    waiting: Mutex<Option<JoinHandle<crate::Result<()>>>>,
}

impl NodeRow {
    /// A node row with no write under way.
    pub fn new() -> Self {
        NodeRow::default()
    }

    /// Writes `node`'s row on `backend`, or leaves the write under way after a second
    /// (then `Ok`). While an earlier write still waits, starts none. An error is that of
    /// this write, or of the earlier one that ended since the last call.
    pub async fn refresh(&self, backend: &Arc<dyn Backend>, node: &NodeInfo) -> crate::Result<()> {
        let mut waiting = self.waiting.lock().await;
        if let Some(write) = waiting.take() {
            if !write.is_finished() {
                *waiting = Some(write);
                tracing::debug!("the node's row is still held by another transaction");
                return Ok(());
            }
            tracing::info!("the node heartbeat that waited on its row has ended");
            joined(write.await)?;
        }
        let (backend, node) = (backend.clone(), node.clone());
        let mut write = tokio::spawn(async move {
            let written = backend.node_heartbeat(&node).await;
            // Said here too: a write left waiting may end after the node stopped beating.
            if let Err(e) = &written {
                tracing::debug!(error = %e.with_causes(), "the node heartbeat failed");
            }
            written
        });
        match tokio::time::timeout(NODE_ROW_WAIT, &mut write).await {
            Ok(done) => joined(done),
            Err(_) => {
                tracing::warn!(
                    "the node's row did not take its heartbeat within {NODE_ROW_WAIT:?} (another transaction may hold it); it waits for it while the leases are renewed"
                );
                *waiting = Some(write);
                Ok(())
            }
        }
    }
}

/// The result of a node row's write, from its task.
fn joined(
    done: std::result::Result<crate::Result<()>, tokio::task::JoinError>,
) -> crate::Result<()> {
    done.map_err(|e| Error::Refused(format!("the node heartbeat's task failed: {e}")))?
}
