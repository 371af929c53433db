//! The server's background tasks: the notification listener and the node row its
//! [`hopper::maintenance::Heartbeat`] refreshes (the outcome and log writers have files of
//! their own). The maintenance the workers' runtimes would otherwise do runs as the same
//! [`hopper::maintenance`] services.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hopper::maintenance::{Beat, NodeRow, OnWakeup};
use hopper_core::Wakeup;
use hopper_core::backend::{Backend, NodeInfo};
use tokio::sync::{mpsc, watch};

use crate::ServeConfig;

use crate::server::{Event, Peers};

/// The node row: the queues served and the total concurrency of connected workers.
pub(crate) fn node_info(config: &ServeConfig, peers: &Peers) -> NodeInfo {
    let mut queues: Vec<String> = peers
        .values()
        .filter(|p| p.role() == hopper_protocol::Role::Worker)
        .flat_map(|p| p.queues().iter().cloned())
        .collect();
    queues.sort();
    queues.dedup();
    let concurrency: usize = peers
        .values()
        .filter(|p| p.role() == hopper_protocol::Role::Worker)
        .map(|p| p.concurrency())
        .sum();
    NodeInfo {
        id: config.node_id,
        name: config.node_name.clone(),
        queues,
        concurrency: i32::try_from(concurrency).unwrap_or(i32::MAX),
    }
}

/// Forwards database notifications to the loop.
pub(crate) struct LoopWakeups(pub mpsc::Sender<Event>);

#[async_trait::async_trait]
impl OnWakeup for LoopWakeups {
    async fn wakeup(&self, wakeup: Wakeup) -> bool {
        self.0.send(Event::Wakeup(wakeup)).await.is_ok()
    }

    async fn unsubscribed(&self, error: &hopper_core::Error) {
        tracing::warn!(error = %crate::convert::detail(error), "subscribing to wake-ups failed; polling meanwhile");
        // No announcements meanwhile: every served queue is claimed from again.
        let _ = self.0.send(Event::Wakeup(Wakeup::Resync)).await;
    }
}

/// The server's heartbeat: the node row as the loop last described it (the queues served
/// and the concurrency of the connected workers).
pub(crate) struct NodeBeat {
    pub backend: Arc<dyn Backend>,
    pub node: watch::Receiver<NodeInfo>,
    /// Set while the server has lost its liveness lock (`liveness.rs`).
    pub fenced: Arc<AtomicBool>,
    /// The server's node row, never waited on for long.
    pub row: NodeRow,
}

#[async_trait::async_trait]
impl Beat for NodeBeat {
    async fn beat(&self) -> hopper::Result<()> {
        // A fenced server does not say it is alive: it may have been released.
        if self.fenced.load(Ordering::Acquire) {
            return Ok(());
        }
        let node = self.node.borrow().clone();
        self.row.refresh(&self.backend, &node).await
    }
}
