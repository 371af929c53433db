//! The background services of a runtime, each the same shape: a loop that does one thing
//! every period, logs and backs off on errors, and stops when its token is cancelled.
//!
//! - heartbeat: keeps the node registered and renews the leases of running jobs;
//! - rescuer: takes back jobs whose lease expired and releases dead nodes' jobs (at once
//!   for nodes whose liveness lock went free, where the backend tracks it);
//! - promoter: makes scheduled jobs available when due, sleeping until the next one;
//! - listener: turns LISTEN/NOTIFY wake-ups into producer wake-ups and cancellations;
//! - pruner and vacuumer: retention and vacuuming of the job table, shared with `hopper
//!   serve` ([`crate::housekeeping`]).
//!
//! Every node runs them; the statements use `SKIP LOCKED` and are idempotent, so several
//! nodes running them at once only share the work. The pruner is also elected: each of
//! its statements first takes an advisory lock, and a node that does not get it skips
//! that pass, so one node at a time deletes.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt;
use hopper_core::liveness::VANISHED_CHECK_PERIOD;
use hopper_core::{Lease, Wakeup};
use tokio::time::Instant;

use super::Shared;
use crate::context::StopReason;

/// Sleeps `period`, returning false if the services are stopping.
async fn tick(shared: &Shared, period: Duration) -> bool {
    crate::housekeeping::tick(&shared.stop_services, period).await
}

pub(crate) async fn heartbeat(shared: Arc<Shared>) {
    let period = shared.config.effective_heartbeat();
    while tick(&shared, period).await {
        // A fenced node does not say it is alive: it may have been released.
        if shared.fenced.load(Ordering::Acquire) {
            continue;
        }
        if let Err(e) = shared.backend.node_heartbeat(&shared.node).await {
            tracing::warn!(error = %e, "node heartbeat failed");
            continue;
        }
        let due: Vec<_> = shared.running_due_for_renewal(period);
        renew(&shared, &due).await;
    }
}

/// Extends the leases of `due` running jobs, and stops the handlers of those lost.
pub(super) async fn renew(shared: &Shared, due: &[Lease]) {
    if due.is_empty() {
        return;
    }
    match shared
        .backend
        .job_extend_many(due, shared.config.lease)
        .await
    {
        Ok(lost) => {
            shared.running_renewed(due, Instant::now());
            for lease in lost {
                tracing::warn!(job_id = %lease.job_id, attempt = lease.attempt, "lease lost; stopping the handler");
                shared.running_stop(lease.job_id, StopReason::LeaseLost);
            }
        }
        Err(e) => tracing::warn!(error = %e, jobs = due.len(), "renewing leases failed"),
    }
}

/// Every `rescue_interval`, takes back expired leases and the jobs of nodes silent for
/// `node_dead_after`. Where the backend tracks node liveness, it also looks every
/// [`VANISHED_CHECK_PERIOD`] for nodes whose liveness lock went free and releases their
/// jobs at once.
pub(crate) async fn rescuer(shared: Arc<Shared>) {
    let liveness = shared.backend.node_liveness().is_some();
    let period = if liveness {
        shared.config.rescue_interval.min(VANISHED_CHECK_PERIOD)
    } else {
        shared.config.rescue_interval
    };
    let mut last_rescue = Instant::now();
    while tick(&shared, period).await {
        if let Some(liveness) = shared.backend.node_liveness() {
            match liveness.node_release_vanished().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(jobs = n, "released the jobs of vanished nodes"),
                Err(e) => tracing::warn!(error = %e, "releasing vanished nodes failed"),
            }
        }
        if last_rescue.elapsed() + period / 2 < shared.config.rescue_interval {
            continue;
        }
        last_rescue = Instant::now();
        match shared.backend.job_rescue_expired().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(jobs = n, "rescued jobs whose lease expired"),
            Err(e) => tracing::warn!(error = %e, "rescuing expired leases failed"),
        }
        match shared
            .backend
            .node_release_dead(shared.config.node_dead_after)
            .await
        {
            Ok(0) => {}
            Ok(n) => tracing::info!(jobs = n, "released the jobs of dead nodes"),
            Err(e) => tracing::warn!(error = %e, "releasing dead nodes failed"),
        }
    }
}

pub(crate) async fn promoter(shared: Arc<Shared>) {
    let mut wait = Duration::ZERO;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shared.promote.notified() => {}
            _ = shared.stop_services.cancelled() => return,
        }
        wait = match shared.backend.job_promote_scheduled().await {
            Ok((_, Some(next))) => {
                let until = (next - chrono::Utc::now())
                    .to_std()
                    .unwrap_or(Duration::ZERO);
                until.min(shared.config.poll_interval) + Duration::from_millis(1)
            }
            Ok((_, None)) => shared.config.poll_interval,
            Err(e) => {
                tracing::warn!(error = %e, "promoting scheduled jobs failed");
                shared.config.poll_interval
            }
        };
    }
}

pub(crate) async fn listener(shared: Arc<Shared>) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let mut stream = match shared.backend.subscribe().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "subscribing to wake-ups failed; polling meanwhile");
                if !tick(&shared, backoff).await {
                    return;
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        backoff = Duration::from_millis(100);
        loop {
            let wakeup = tokio::select! {
                w = stream.next() => w,
                _ = shared.stop_services.cancelled() => return,
            };
            match wakeup {
                Some(Wakeup::Jobs(queue)) => {
                    if shared.config.queues.contains(&queue) {
                        shared.wake.notify_one();
                    }
                }
                Some(Wakeup::Cancelled(id)) => shared.running_stop(id, StopReason::Cancelled),
                Some(Wakeup::Resync) => shared.wake.notify_one(),
                None => break,
            }
        }
    }
}
