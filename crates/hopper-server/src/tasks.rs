//! The server's background tasks: the batching outcome writer, the notification listener, and the maintenance the workers' runtimes would
//! otherwise do (rescuing expired leases, releasing dead nodes, promoting scheduled jobs).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use hopper_core::backend::{
    Backend, Finish, FinishResult, JobPromoteOutcome, NodeInfo, NodeReleaseDeadParams,
};
use hopper_protocol::{FinishResult as WireResult, Reply};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::ServeConfig;
use crate::convert::error_code;
use crate::server::{Event, Peer, PeerId};

/// The node row: the queues served and the total concurrency of connected workers.
pub(crate) fn node_info(config: &ServeConfig, peers: &HashMap<PeerId, Peer>) -> NodeInfo {
    let mut queues: Vec<String> = peers
        .values()
        .filter(|p| p.role == hopper_protocol::Role::Worker)
        .flat_map(|p| p.queues.iter().cloned())
        .collect();
    queues.sort();
    queues.dedup();
    let concurrency: usize = peers
        .values()
        .filter(|p| p.role == hopper_protocol::Role::Worker)
        .map(|p| p.concurrency)
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
            (ReplyTo::Ack(peer, req), Some(Err(e))) => {
                (peer, Reply::error(Some(req), error_code(e), e.to_string()))
            }
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

/// Forwards database notifications to the loop, resubscribing when the stream ends.
pub(crate) async fn listen(
    backend: Arc<dyn Backend>,
    events: mpsc::Sender<Event>,
    stop: CancellationToken,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let mut stream = tokio::select! {
            s = backend.subscribe() => match s {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %crate::convert::detail(&e), "subscribing to wake-ups failed; polling meanwhile");
                    // No announcements meanwhile: every served queue is claimed from again.
                    let _ = events.send(Event::Wakeup(hopper_core::Wakeup::Resync)).await;
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = stop.cancelled() => return,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            },
            _ = stop.cancelled() => return,
        };
        backoff = Duration::from_millis(100);
        loop {
            let wakeup = tokio::select! {
                w = stream.next() => w,
                _ = stop.cancelled() => return,
            };
            match wakeup {
                Some(w) => {
                    if events.send(Event::Wakeup(w)).await.is_err() {
                        return;
                    }
                }
                None => break,
            }
        }
    }
}

/// Takes back expired leases and dead nodes' jobs, every second (at once for nodes whose
/// liveness lock went free, where the backend tracks liveness).
pub(crate) async fn rescue(
    backend: Arc<dyn Backend>,
    node_dead_after: Duration,
    stop: CancellationToken,
) {
    let Some(store) = backend.maintenance() else {
        tracing::warn!(
            backend = backend.name(),
            "this backend does no maintenance; nothing rescues expired leases"
        );
        return;
    };
    let release_dead = NodeReleaseDeadParams {
        dead_after: node_dead_after,
    };
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.cancelled() => return,
        }
        match store.job_rescue_expired().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(jobs = n, "rescued jobs whose lease expired"),
            Err(e) => tracing::warn!(error = %e, "rescuing expired leases failed"),
        }
        if let Some(liveness) = backend.node_liveness() {
            match liveness.node_release_vanished().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(jobs = n, "released the jobs of vanished nodes"),
                Err(e) => tracing::warn!(error = %e, "releasing vanished nodes failed"),
            }
        }
        match store.node_release_dead(&release_dead).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(jobs = n, "released the jobs of dead nodes"),
            Err(e) => tracing::warn!(error = %e, "releasing dead nodes failed"),
        }
    }
}

/// Makes scheduled jobs available when due, sleeping until the next one (at most `poll`).
pub(crate) async fn promote(
    backend: Arc<dyn Backend>,
    poll: Duration,
    stop: CancellationToken,
) -> hopper_core::Result<()> {
    let Some(store) = backend.maintenance() else {
        tracing::warn!(
            backend = backend.name(),
            "this backend does no maintenance; nothing promotes scheduled jobs"
        );
        return Ok(());
    };
    let mut wait = Duration::ZERO;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => return Ok(()),
        }
        wait = match store.job_promote_scheduled().await {
            Ok(JobPromoteOutcome {
                next_due: Some(next),
                ..
            }) => {
                let until = (next - chrono::Utc::now())
                    .to_std()
                    .unwrap_or(Duration::ZERO);
                until.min(poll) + Duration::from_millis(1)
            }
            Ok(JobPromoteOutcome { next_due: None, .. }) => poll,
            // The database is away: ride it out. Anything else (a missing table, a
            // privilege revoked) fails again the same way: the supervisor counts it, and
            // gives up (the process unhealthy) if it keeps failing.
            Err(e) if e.is_transient() => {
                tracing::warn!(error = %e, "promoting scheduled jobs failed");
                poll
            }
            Err(e) => return Err(e),
        };
    }
}
