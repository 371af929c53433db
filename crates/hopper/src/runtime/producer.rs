//! The producer: claims jobs in batches as slots free up, and starts them.
//!
//! It claims as many jobs as there are free slots (up to `claim_batch`), from the queues in
//! turn. A full batch means more may be waiting, so it claims again at once; a short one
//! means the queues are drained, so it sleeps until a notification, the poll interval, or
//! shutdown. Database errors back off (100 ms doubling to 5 s) and never stop the loop.
//!
//! A runtime serving one queue claims ahead of its free slots instead ([`super::prefetch`],
//! unless `prefetch` is 0).
//!
//! With several queues, the free slots are shared by weight ([`claim_weighted`]): each
//! queue may fill its share of the concurrency first, the least served (running jobs over
//! weight) going first; what is left goes to whichever still has work. With one queue
//! the loop claims exactly as before, with no bookkeeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hopper_core::{ClaimParams, ClaimedJob, Result};

use super::Shared;
use super::executor::run_job;

pub(crate) async fn run(shared: Arc<Shared>) {
    if let [queue] = shared.config.queues.as_slice()
        && shared.config.prefetch != Some(0)
    {
        let queue = queue.clone();
        return super::prefetch::run(shared, queue).await;
    }
    let queues = &shared.config.queues;
    let mut next_queue = 0usize;
    let mut backoff = Duration::from_millis(100);
    // Jobs of each queue running on this node (several queues only).
    let running: Vec<Arc<AtomicUsize>> = queues.iter().map(|_| Arc::default()).collect();
    loop {
        let mut permits = tokio::select! {
            p = shared.slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            _ = shared.stop_claiming.cancelled() => return,
        };
        let extra = shared
            .slots
            .available_permits()
            .min(shared.config.claim_batch.saturating_sub(1));
        if extra > 0
            && let Ok(more) = shared.slots.clone().try_acquire_many_owned(extra as u32)
        {
            permits.merge(more);
        }
        let want = permits.num_permits();
        let mut claimed = Vec::with_capacity(want);
        let mut failed = false;
        if queues.len() > 1 {
            if let Err(e) = claim_weighted(&shared, &running, want, &mut claimed).await {
                tracing::warn!(error = %e.with_causes(), retry_in = ?backoff, "claim failed");
                failed = true;
            }
        } else {
            for i in 0..queues.len() {
                let queue = &queues[(next_queue + i) % queues.len()];
                let params = ClaimParams {
                    queue: queue.clone(),
                    node: shared.node.id,
                    limit: (want - claimed.len()) as u32,
                    lease: shared.config.lease,
                    kinds: None,
                };
                match shared.claim(&params).await {
                    Ok(jobs) => claimed.extend(jobs),
                    Err(e) => {
                        tracing::warn!(error = %e.with_causes(), %queue, retry_in = ?backoff, "claim failed");
                        failed = true;
                        break;
                    }
                }
                if claimed.len() == want {
                    break;
                }
            }
        }
        next_queue = next_queue.wrapping_add(1);
        let full = claimed.len() == want;
        for job in claimed {
            let Some(permit) = permits.split(1) else {
                break;
            };
            if queues.len() > 1
                && let Some(i) = queues.iter().position(|q| *q == job.queue)
            {
                let counter = running[i].clone();
                counter.fetch_add(1, Ordering::Relaxed);
                let shared = shared.clone();
                tokio::spawn(async move {
                    run_job(shared, job, permit).await;
                    counter.fetch_sub(1, Ordering::Relaxed);
                });
                continue;
            }
            tokio::spawn(run_job(shared.clone(), job, permit));
        }
        drop(permits);
        if failed {
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = shared.stop_claiming.cancelled() => return,
            }
            backoff = (backoff * 2).min(Duration::from_secs(5));
            continue;
        }
        backoff = Duration::from_millis(100);
        if !full {
            tokio::select! {
                _ = shared.wake.notified() => {}
                _ = tokio::time::sleep(shared.config.poll_interval) => {}
                _ = shared.stop_claiming.cancelled() => return,
            }
        }
    }
}

/// Claims up to `want` jobs across several queues by weight, into `claimed`.
///
/// Pass 1 visits the queues least served first (running jobs over weight) and claims up to
/// each one's share of the concurrency (`concurrency × weight / total weight`, rounded up)
/// minus what it already runs. Pass 2 hands what is left to the queues that filled their
/// pass-1 claim, so no slot stays idle while any queue has work (work-conserving).
async fn claim_weighted(
    shared: &Shared,
    running: &[Arc<AtomicUsize>],
    want: usize,
    claimed: &mut Vec<ClaimedJob>,
) -> Result<()> {
    let queues = &shared.config.queues;
    let concurrency = shared.config.concurrency.max(1);
    let weights: Vec<u32> = queues.iter().map(|q| shared.config.weight(q)).collect();
    let total: u64 = weights.iter().map(|w| u64::from(*w)).sum();
    let busy: Vec<usize> = running.iter().map(|r| r.load(Ordering::Relaxed)).collect();
    let mut order: Vec<usize> = (0..queues.len()).collect();
    order.sort_by(|&a, &b| {
        let load = |i: usize| busy[i] as f64 / f64::from(weights[i]);
        load(a).total_cmp(&load(b))
    });
    let mut drained = vec![false; queues.len()];
    for pass in 0..2 {
        for &i in &order {
            let left = want - claimed.len();
            if left == 0 {
                return Ok(());
            }
            let limit = if pass == 0 {
                let share = (concurrency as u64 * u64::from(weights[i])).div_ceil(total.max(1));
                left.min(
                    usize::try_from(share)
                        .unwrap_or(usize::MAX)
                        .saturating_sub(busy[i]),
                )
            } else if drained[i] {
                0
            } else {
                left
            };
            if limit == 0 {
                continue;
            }
            let params = ClaimParams {
                queue: queues[i].clone(),
                node: shared.node.id,
                limit: u32::try_from(limit).unwrap_or(u32::MAX),
                lease: shared.config.lease,
                kinds: None,
            };
            let jobs = shared.claim(&params).await?;
            drained[i] = jobs.len() < limit;
            claimed.extend(jobs);
        }
    }
    Ok(())
}
