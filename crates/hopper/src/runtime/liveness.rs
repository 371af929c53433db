//! Keeping the node's liveness lock ([`hopper_core::NodeLiveness`]), where the backend
//! offers one.
//!
//! The node took its lock before it was registered ([`super::Runtime::start`]). If the lock
//! is lost while the process lives (its connection dropped), other nodes may at this very
//! moment take the node for vanished and release its jobs. So the node is *fenced* at
//! once: it claims nothing and sends no heartbeat, and it takes its lock again, under the
//! same id, with backoff. Once it holds the lock again, nobody can release it any more; it
//! renews every lease it holds, and the handlers of the jobs released meanwhile are told
//! `LeaseLost` and stopped. Their outcomes would have been refused anyway: the lease is
//! the fence, the node id only says whose jobs to release. docs/reliability.md has the
//! reasoning, and why the same id is safe.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hopper_core::{Lease, NodeHold};

use super::Shared;
use super::services::renew;

/// Longest wait between two attempts to take the lock again.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Holds the lock until the services stop, then hands it back to the shutdown (which drops
/// it last). `None` if the services stopped while the node was fenced.
pub(crate) async fn keep(shared: Arc<Shared>, mut hold: NodeHold) -> Option<NodeHold> {
    loop {
        let why = tokio::select! {
            why = hold.lost() => why,
            _ = shared.stop_services.cancelled() => return Some(hold),
        };
        shared.fenced.store(true, Ordering::Release);
        tracing::warn!(node = %shared.node.id, reason = %why, "the node lost its liveness lock; no claims until it holds it again");
        drop(hold);
        let Some(again) = retake(&shared).await else {
            // Stopping, or the backend stopped offering liveness: heartbeats take over.
            shared.fenced.store(false, Ordering::Release);
            return None;
        };
        hold = again;
        shared.fenced.store(false, Ordering::Release);
        tracing::info!(node = %shared.node.id, "the node holds its liveness lock again");
        let all: Vec<Lease> = shared.running().values().map(|r| r.lease).collect();
        if let Err(e) = renew(&shared, &all).await {
            // The heartbeat renews them again at its next beat.
            tracing::warn!(error = %e.with_causes(), jobs = all.len(), "renewing leases after retaking the lock failed");
        }
        shared.wake.notify_one();
    }
}

/// Takes the lock again, with backoff; `None` if the services stop first.
async fn retake(shared: &Shared) -> Option<NodeHold> {
    let liveness = shared.backend.node_liveness()?;
    let mut backoff = Duration::from_millis(100);
    loop {
        if !crate::maintenance::tick(&shared.stop_services, backoff).await {
            return None;
        }
        match liveness.node_hold(&shared.node).await {
            Ok(hold) => return Some(hold),
            Err(e) => {
                tracing::warn!(error = %e.with_causes(), retry_in = ?backoff, "taking the liveness lock again failed");
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}
