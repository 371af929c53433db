//! The server's background tasks: the batching outcome and log writers, the notification
//! listener, and the node row its [`hopper::maintenance::Heartbeat`] refreshes. The
//! maintenance the workers' runtimes would otherwise do runs as the same
//! [`hopper::maintenance`] services.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hopper::maintenance::{Beat, OnWakeup};
use hopper_core::Wakeup;
use hopper_core::backend::{Backend, Finish, FinishResult, NodeInfo};
use hopper_protocol::{FinishResult as WireResult, Reply};
use tokio::sync::{mpsc, watch};

use crate::ServeConfig;

use crate::server::{Event, PeerId, Peers};

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

/// Who to acknowledge outcomes to.
pub(crate) enum ReplyTo {
    /// Nobody (the server decided the outcome itself).
    Nobody,
    /// One `ack` for the one outcome.
    Ack(PeerId, u64),
    /// One `acks` with a result per outcome: the `Some` results were decided already,
    /// each `None` takes the next written outcome's.
    Acks(PeerId, u64, Vec<Option<WireResult>>),
}

/// Outcomes to write, and who to acknowledge them to.
pub(crate) struct FinishItem {
    pub finishes: Vec<Finish>,
    pub reply_to: ReplyTo,
}

/// Most outcomes written by one statement.
const FINISH_BATCH: usize = 1000;

/// Writes outcomes in batches (one statement per kind of outcome per batch) and
/// acknowledges each. `writers` batches are written at once, so one slow round trip does
/// not hold up the rest. A write that fails because the database is unreachable is retried
/// with backoff, never dropped; an outcome refused for good is isolated from its batch and
/// answered with its error ([`hopper::outcomes`]); the loop hears of every lease written
/// ([`Event::Written`]). The channel is shared so that a run restarted by its supervisor
/// takes it over.
pub(crate) async fn finish(
    backend: Arc<dyn Backend>,
    items: Arc<tokio::sync::Mutex<mpsc::Receiver<FinishItem>>>,
    out: mpsc::Sender<(PeerId, Reply)>,
    events: mpsc::Sender<Event>,
    writers: usize,
) {
    let mut tasks = Vec::new();
    for _ in 0..writers.max(1) {
        let (backend, items, out) = (backend.clone(), items.clone(), out.clone());
        let events = events.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let batch = {
                    let mut items = items.lock().await;
                    let Some(first) = items.recv().await else {
                        return;
                    };
                    let mut size = first.finishes.len();
                    let mut batch = vec![first];
                    while size < FINISH_BATCH {
                        match items.try_recv() {
                            Ok(item) => {
                                size += item.finishes.len();
                                batch.push(item);
                            }
                            Err(_) => break,
                        }
                    }
                    batch
                };
                let leases = batch
                    .iter()
                    .flat_map(|i| i.finishes.iter().map(|f| f.lease))
                    .collect();
                write_batch(&*backend, batch, &out).await;
                let _ = events.send(Event::Written(leases)).await;
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
}

async fn write_batch(
    backend: &dyn Backend,
    batch: Vec<FinishItem>,
    out: &mpsc::Sender<(PeerId, Reply)>,
) {
    let finishes: Vec<Finish> = batch
        .iter()
        .flat_map(|i| i.finishes.iter().cloned())
        .collect();
    // Transient failures are retried until they pass; an outcome refused for good is
    // isolated from the batch, answered with its error and counted (hopper::outcomes).
    let results = hopper::outcomes::write_isolating(backend, &finishes).await;
    let wire = |i: usize| match results.get(i) {
        Some(Ok(FinishResult::Recorded(_))) => WireResult::Recorded,
        _ => WireResult::LeaseLost,
    };
    let mut at = 0;
    for item in batch {
        let range = at..at + item.finishes.len();
        at = range.end;
        let (peer, reply) = match (item.reply_to, results.get(range.start)) {
            (ReplyTo::Nobody, _) => continue,
            (ReplyTo::Ack(peer, req), Some(Err(e))) => (peer, Reply::failure(Some(req), e)),
            (ReplyTo::Ack(peer, req), _) => (
                peer,
                Reply::Ack {
                    req,
                    result: wire(range.start),
                },
            ),
            (ReplyTo::Acks(peer, req, preset), _) => {
                let mut written = range.map(wire);
                let results = preset
                    .into_iter()
                    .map(|r| {
                        r.or_else(|| written.next())
                            .unwrap_or(WireResult::LeaseLost)
                    })
                    .collect();
                (peer, Reply::Acks { req, results })
            }
        };
        let _ = out.send((peer, reply)).await;
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
}

#[async_trait::async_trait]
impl Beat for NodeBeat {
    async fn beat(&self) -> hopper::Result<()> {
        // A fenced server does not say it is alive: it may have been released.
        if self.fenced.load(Ordering::Acquire) {
            return Ok(());
        }
        let node = self.node.borrow().clone();
        self.backend.node_heartbeat(&node).await
    }
}
