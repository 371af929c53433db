//! The server's node liveness lock ([`hopper_core::NodeLiveness`]), where the backend offers
//! one: the jobs a `hopper serve` has dispatched are leased under its node id, so a server
//! killed with SIGKILL has them released by the other nodes' rescuers within a check
//! period, as a crashed runtime's are, instead of waiting for their leases.
//!
//! As in a runtime (`hopper::runtime`'s liveness), the lock is taken before the node is
//! registered, and a server that loses it while it lives is *fenced*: it claims nothing and
//! sends no node heartbeat until it holds the lock again. Unlike a runtime, a server that
//! stops on purpose keeps its registration and its leases for the next server under the
//! same node id (which adopts what workers still hold): it lets go of the lock's
//! registration first ([`hopper_core::NodeLiveness::node_let_go`]), so that giving the lock
//! back does not make it vanished.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hopper::backend::Backend;
use hopper_core::{NodeHold, NodeInfo, Result};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Longest wait between two attempts to take the lock.
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How long a starting server tries to take its lock: the previous server under the same
/// id may have stopped a moment ago, its session not yet ended in the database.
const START_PATIENCE: Duration = Duration::from_secs(10);

/// The lock, kept by a task until the server stops.
pub(crate) struct Hold {
    keeper: JoinHandle<Option<NodeHold>>,
    backend: Arc<dyn Backend>,
    node: NodeInfo,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("node", &self.node.id)
            .finish_non_exhaustive()
    }
}

/// Takes the node's lock and registers it as its holder, or, without liveness, registers
/// it by a heartbeat. The lock is kept until `stop`; `fenced` is set while it is lost.
pub(crate) async fn start(
    backend: &Arc<dyn Backend>,
    node: NodeInfo,
    fenced: Arc<AtomicBool>,
    stop: &CancellationToken,
) -> Result<Option<Hold>> {
    let Some(liveness) = backend.node_liveness() else {
        backend.node_heartbeat(&node).await?;
        return Ok(None);
    };
    let began = tokio::time::Instant::now();
    let mut backoff = Duration::from_millis(50);
    let hold = loop {
        match liveness.node_hold(&node).await {
            Ok(hold) => break hold,
            Err(e) if began.elapsed() < START_PATIENCE => {
                tracing::info!(error = %e.with_causes(), retry_in = ?backoff, "taking the node's liveness lock failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(e) => return Err(e),
        }
    };
    let keeper = tokio::spawn(keep(
        backend.clone(),
        node.clone(),
        hold,
        fenced,
        stop.clone(),
    ));
    Ok(Some(Hold {
        keeper,
        backend: backend.clone(),
        node,
    }))
}

impl Hold {
    /// After the server stopped: lets go of the registration, then gives the lock back.
    pub(crate) async fn release(self) {
        let Ok(Some(hold)) = self.keeper.await else {
            return;
        };
        if let Some(liveness) = self.backend.node_liveness()
            && let Err(e) = liveness.node_let_go(self.node.id).await
        {
            tracing::warn!(error = %e.with_causes(), "letting go of the node's liveness lock failed; its jobs will be released as a vanished node's");
        }
        drop(hold);
    }

    /// As a crash: the lock is given back with the registration, so other nodes release
    /// the server's jobs.
    pub(crate) fn abort(&self) {
        self.keeper.abort();
    }
}

/// Holds the lock until `stop`, then hands it back; while it is lost, the server is fenced
/// and takes it again with backoff. `None` if the server stopped while fenced.
async fn keep(
    backend: Arc<dyn Backend>,
    node: NodeInfo,
    mut hold: NodeHold,
    fenced: Arc<AtomicBool>,
    stop: CancellationToken,
) -> Option<NodeHold> {
    loop {
        let why = tokio::select! {
            why = hold.lost() => why,
            _ = stop.cancelled() => return Some(hold),
        };
        fenced.store(true, Ordering::Release);
        tracing::warn!(node = %node.id, reason = %why, "the server lost its liveness lock; no claims until it holds it again");
        drop(hold);
        let mut backoff = Duration::from_millis(100);
        hold = loop {
            tokio::select! {
                _ = stop.cancelled() => return None,
                _ = tokio::time::sleep(backoff) => {}
            }
            let liveness = backend.node_liveness()?;
            match liveness.node_hold(&node).await {
                Ok(hold) => break hold,
                Err(e) => {
                    tracing::warn!(error = %e.with_causes(), retry_in = ?backoff, "taking the liveness lock again failed");
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        };
        fenced.store(false, Ordering::Release);
        tracing::info!(node = %node.id, "the server holds its liveness lock again");
    }
}
