//! Node liveness that the storage itself tracks: a capability of backends that can tell,
//! within moments, that a node's process (or its session) has ended.
//!
//! Without it, a node is dead when its heartbeat has been silent for `node_dead_after`
//! ([`crate::MaintenanceStore::node_release_dead`]), and a crashed worker's jobs wait that long or
//! for their leases. A backend that offers [`NodeLiveness`] gives each node a lock that
//! the storage releases by itself when the holder goes away: a session-level advisory lock
//! on a dedicated PostgreSQL connection, an OS file lock beside a SQLite file. Other nodes
//! look for registered nodes whose lock is free ([`NodeLiveness::node_release_vanished`],
//! every [`VANISHED_CHECK_PERIOD`]) and release their running jobs at once.
//!
//! The rules every implementation keeps (docs/reliability.md gives the reasoning):
//!
//! - a node takes its lock *before* it is registered as holding one, so a registered
//!   holder whose lock is free has really lost it;
//! - the release of a vanished node takes its lock for the length of the release, so a
//!   node re-taking its lock cannot interleave with its own release;
//! - a live node never has its jobs released by this check: only a free lock counts;
//! - a node that loses its lock while it lives ([`NodeHold::lost`]) is *fenced*: it stops
//!   claiming and heartbeating until it holds the lock again. Its jobs may have been
//!   released meanwhile; their outcomes are then refused by the leases (`LeaseLost`), as
//!   for any expired lease, and nothing else it does can touch them.

use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::BoxFuture;

use crate::backend::NodeInfo;
use crate::error::Result;

/// How often a node looks for vanished nodes: a crashed node's jobs are released within
/// this period (plus one statement) of its lock going free.
pub const VANISHED_CHECK_PERIOD: Duration = Duration::from_millis(500);

/// A node's liveness lock, held until this value is dropped.
///
/// Dropping it gives the lock back (the connection is closed, the file unlocked): drop it
/// only after the node is deregistered, or other nodes release what it still holds.
pub struct NodeHold {
    lost: Option<BoxFuture<'static, String>>,
    _guard: Box<dyn Send + Sync>,
}

impl NodeHold {
    /// A hold kept alive by `guard`; `lost` resolves, with the reason, if the lock is lost
    /// while the node lives (a backend that cannot lose it passes a future that never
    /// resolves).
    pub fn new(lost: BoxFuture<'static, String>, guard: Box<dyn Send + Sync>) -> Self {
        NodeHold {
            lost: Some(lost),
            _guard: guard,
        }
    }

    /// Resolves, with the reason, once the lock is lost (at once on later calls).
    pub async fn lost(&mut self) -> String {
        match self.lost.take() {
            Some(lost) => lost.await,
            None => "the liveness lock was lost earlier".to_owned(),
        }
    }
}

impl std::fmt::Debug for NodeHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeHold").finish_non_exhaustive()
    }
}

/// The liveness capability of a backend; see the module docs. Offered through
/// [`crate::Backend::node_liveness`].
#[async_trait]
pub trait NodeLiveness: Send + Sync {
    /// Takes `node`'s liveness lock, then registers (or refreshes) the node as its holder.
    /// Called when a node starts and again, with the same node, after its lock was lost.
    /// Fails if the lock cannot be taken (the storage cannot be reached, or the lock is
    /// still held: by the node's own session that the storage has not yet seen end, or by
    /// a release of the node in progress); the caller retries.
    async fn node_hold(&self, node: &NodeInfo) -> Result<NodeHold>;

    /// Releases every running job of registered holders whose lock is free (a failed
    /// attempt each, the reason recorded) and forgets those nodes, each with its last
    /// running job, as [`crate::MaintenanceStore::node_release_dead`] does. Returns how
    /// many jobs.
    async fn node_release_vanished(&self) -> Result<u64>;

    /// Keeps `node` registered, but no longer as the holder of a liveness lock, so that the
    /// lock it gives back next does not make it vanished: for a node that stops on purpose
    /// while its running jobs are to be taken up by its successor under the same id
    /// (`hopper serve`). Such a node is found dead, if no successor comes, by its silent
    /// heartbeat. Call it while still holding the lock. The default does nothing (the
    /// node's jobs are then released as a vanished node's once the lock is given back).
    async fn node_let_go(&self, node: crate::NodeId) -> Result<()> {
        let _ = node;
        Ok(())
    }
}
