//! The producer: claims jobs in batches as slots free up, and starts them.
//!
//! It claims as many jobs as there are free slots (up to `claim_batch`), from the queues in
//! turn. A full batch means more may be waiting, so it claims again at once; a short one
//! means the queues are drained, so it sleeps until a notification, the poll interval, or
//! shutdown. Database errors back off (100 ms doubling to 5 s) and never stop the loop.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::ClaimParams;

use super::Shared;
use super::executor::run_job;

pub(crate) async fn run(shared: Arc<Shared>) {
    let queues = &shared.config.queues;
    let mut next_queue = 0usize;
    let mut backoff = Duration::from_millis(100);
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
        for i in 0..queues.len() {
            let queue = &queues[(next_queue + i) % queues.len()];
            let params = ClaimParams {
                queue: queue.clone(),
                node: shared.node.id,
                limit: (want - claimed.len()) as u32,
                lease: shared.config.lease,
            };
            match shared.backend.job_claim(&params).await {
                Ok(jobs) => claimed.extend(jobs),
                Err(e) => {
                    tracing::warn!(error = %e, %queue, retry_in = ?backoff, "claim failed");
                    failed = true;
                    break;
                }
            }
            if claimed.len() == want {
                break;
            }
        }
        next_queue = next_queue.wrapping_add(1);
        let full = claimed.len() == want;
        for job in claimed {
            let Some(permit) = permits.split(1) else {
                break;
            };
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
