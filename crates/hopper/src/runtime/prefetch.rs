//! The producer of a runtime serving one queue: it claims ahead of its free slots, with
//! several claims in flight.
//!
//! Besides the running jobs it keeps up to `prefetch` claimed jobs on hand (by default as
//! many as its slots start in 10 ms at the jobs' pace, [`hopper_core::pace`]), and up to
//! `claims_in_flight` claims running at once, each asking for a share of what is missing
//! (free slots + prefetch − on hand − already asked for). Jobs on hand start as slots free
//! up while claims are in flight: claiming overlaps running, each claim (one commit, one
//! WAL flush) carries many jobs, and the database works on two claims at once. Measured on
//! W3 (100,000 no-op jobs, concurrency 50) in docs/benchmarks.md and job_claim.sql.
//!
//! A claim that comes back short means the queue is drained: no new claim starts until a
//! notification, the poll interval or shutdown (the claims already in flight finish). An
//! error backs off the same way (100 ms doubling to 5 s).
//!
//! Jobs on hand are registered as running on this node, so heartbeats renew their leases
//! and a dead node's are released with the others; a job cancelled while on hand is
//! dropped unstarted; at shutdown the claims in flight are awaited and every job on hand
//! is released (available at once, the attempt not counted). With several queues the
//! producer claims exactly the free slots, so that each queue's share by weight stays exact
//! ([`super::producer`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use hopper_core::{ClaimParams, ClaimedJob, Finish, Outcome, Result};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::completer::Pending;
use super::executor::run_job;
use super::{Running, Shared};
use crate::context::RunState;

/// A claim in flight: how many jobs it asked for, and its result.
type Claim = BoxFuture<'static, (usize, Result<Vec<ClaimedJob>>)>;

/// Claims and starts the jobs of `queue` until claiming stops.
pub(crate) async fn run(shared: Arc<Shared>, queue: String) {
    let most_in_flight = shared.config.claims_in_flight.max(1);
    let mut ready: VecDeque<ClaimedJob> = VecDeque::new();
    let mut claims: FuturesUnordered<Claim> = FuturesUnordered::new();
    // Jobs asked for by the claims in flight.
    let mut asked = 0usize;
    // Set while no new claim may start: the queue looked drained, or a claim failed.
    let mut quiet_until: Option<Instant> = None;
    let mut backoff = Duration::from_millis(100);
    loop {
        start_ready(&shared, &mut ready);
        if shared.stop_claiming.is_cancelled() {
            while let Some((_, result)) = claims.next().await {
                if let Ok(jobs) = result {
                    take(&shared, &mut ready, jobs);
                }
            }
            return release(&shared, ready).await;
        }
        if quiet_until.is_none() {
            let prefetch = shared.prefetch();
            while claims.len() < most_in_flight {
                let wanted = Wanted {
                    free: shared.slots.available_permits(),
                    prefetch,
                    on_hand: ready.len(),
                    asked,
                    in_flight: claims.len(),
                };
                let Some(want) =
                    wanted.next_claim(shared.config.claim_batch, shared.config.claims_in_flight)
                else {
                    break;
                };
                asked += want;
                claims.push(claim(shared.clone(), queue.clone(), want));
            }
        }
        let quiet = quiet_until.unwrap_or_else(Instant::now);
        tokio::select! {
            Some((want, result)) = claims.next(), if !claims.is_empty() => {
                asked -= want;
                match result {
                    Ok(jobs) => {
                        backoff = Duration::from_millis(100);
                        if jobs.len() < want {
                            quiet_until = Some(Instant::now() + shared.config.poll_interval);
                        }
                        take(&shared, &mut ready, jobs);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e.with_causes(), %queue, retry_in = ?backoff, "claim failed");
                        quiet_until = Some(Instant::now() + backoff);
                        backoff = (backoff * 2).min(Duration::from_secs(5));
                    }
                }
            }
            p = shared.slots.clone().acquire_owned(), if !ready.is_empty() => match p {
                Ok(p) => start_one(&shared, &mut ready, p),
                // The slots are never closed while the producer runs.
                Err(_) => return release(&shared, ready).await,
            },
            // A free slot with nothing on hand and room for a claim: loop to start one.
            p = shared.slots.clone().acquire_owned(),
                if ready.is_empty() && claims.is_empty() && quiet_until.is_none() => drop(p),
            _ = shared.wake.notified(), if quiet_until.is_some() => quiet_until = None,
            _ = tokio::time::sleep_until(quiet), if quiet_until.is_some() => quiet_until = None,
            _ = shared.stop_claiming.cancelled() => {}
        }
    }
}

/// What the producer holds and wants when it considers starting a claim.
#[derive(Debug, Clone, Copy)]
struct Wanted {
    /// Free concurrency slots.
    free: usize,
    /// Jobs to keep on hand beyond the free slots.
    prefetch: usize,
    /// Jobs claimed and not started yet.
    on_hand: usize,
    /// Jobs asked for by the claims in flight.
    asked: usize,
    /// Claims in flight.
    in_flight: usize,
}

impl Wanted {
    /// How many jobs the next claim asks for, if one should start now: a share of what is
    /// missing (free slots + prefetch − on hand − asked for), split between the claims
    /// that may be in flight, so that the second claim is not left with the crumbs of the
    /// first, but at least a whole claim batch while that many are missing: fewer, larger
    /// claims drain faster (`docs/benchmarks.md`).
    fn next_claim(&self, claim_batch: usize, claims_in_flight: usize) -> Option<usize> {
        let batch = claim_batch.max(1);
        let target = self.free + self.prefetch;
        let missing = target.saturating_sub(self.on_hand + self.asked);
        let share = target
            .div_ceil(claims_in_flight.max(1))
            .max(batch.min(target))
            .max(1);
        let want = missing.min(share).min(batch);
        // With a claim already in flight, a small one is not worth a commit of its own.
        let least = if self.in_flight == 0 {
            1
        } else {
            share.div_ceil(2)
        };
        (want >= least).then_some(want)
    }
}

/// Starts one claim of `want` jobs.
fn claim(shared: Arc<Shared>, queue: String, want: usize) -> Claim {
    Box::pin(async move {
        let params = ClaimParams {
            queue,
            node: shared.node.id,
            limit: u32::try_from(want).unwrap_or(u32::MAX),
            lease: shared.config.lease,
            kinds: None,
        };
        let result = shared.claim(&params).await;
        (want, result)
    })
}

/// Puts claimed jobs on hand, registered as running on this node.
fn take(shared: &Shared, ready: &mut VecDeque<ClaimedJob>, jobs: Vec<ClaimedJob>) {
    for job in jobs {
        hold(shared, &job);
        ready.push_back(job);
    }
}

/// Registers a job on hand as running on this node, so its lease is renewed.
fn hold(shared: &Shared, job: &ClaimedJob) {
    let now = Instant::now();
    shared.running_insert(
        job.lease.job_id,
        Running {
            lease: job.lease,
            run: Arc::new(RunState::new(now + job.timeout)),
            renewed: now,
        },
    );
}

/// Starts jobs on hand while slots are free.
fn start_ready(shared: &Arc<Shared>, ready: &mut VecDeque<ClaimedJob>) {
    while !ready.is_empty() {
        match shared.slots.clone().try_acquire_owned() {
            Ok(p) => start_one(shared, ready, p),
            Err(_) => return,
        }
    }
}

/// Starts the next job on hand in `permit`'s slot, unless it was cancelled (or its lease
/// lost) while waiting: then it is forgotten, as a running job's handler would stop.
fn start_one(shared: &Arc<Shared>, ready: &mut VecDeque<ClaimedJob>, permit: OwnedSemaphorePermit) {
    let Some(job) = ready.pop_front() else {
        return;
    };
    let stopped = shared
        .running()
        .get(&job.lease.job_id)
        .is_some_and(|r| r.run.token.is_cancelled());
    if stopped {
        shared.running_remove(job.lease.job_id);
        return;
    }
    tokio::spawn(run_job(shared.clone(), job, permit));
}

/// Hands the jobs on hand back at shutdown: available at once, the attempt not counted.
async fn release(shared: &Shared, ready: VecDeque<ClaimedJob>) {
    for job in ready {
        shared.running_remove(job.lease.job_id);
        let pending = Pending {
            finish: Finish {
                lease: job.lease,
                outcome: Outcome::Released,
            },
            expect_lost: false,
        };
        if shared.completer.send(pending).await.is_err() {
            tracing::error!(
                "completer stopped; a prefetched job is left to the node's deregistration, which releases it"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Wanted;

    fn wanted(
        free: usize,
        prefetch: usize,
        on_hand: usize,
        asked: usize,
        in_flight: usize,
    ) -> Wanted {
        Wanted {
            free,
            prefetch,
            on_hand,
            asked,
            in_flight,
        }
    }

    #[test]
    fn an_idle_producer_asks_for_a_whole_batch_when_that_many_are_missing() {
        // Concurrency 50, prefetch 2,000, nothing held: one claim of a full batch.
        assert_eq!(wanted(50, 2000, 0, 0, 0).next_claim(2000, 4), Some(2000));
        // A batch larger than what is missing: only what is missing.
        assert_eq!(wanted(50, 100, 0, 0, 0).next_claim(2000, 4), Some(150));
    }

    #[test]
    fn nothing_is_claimed_when_nothing_is_missing() {
        assert_eq!(wanted(0, 0, 0, 0, 0).next_claim(2000, 4), None);
        assert_eq!(wanted(10, 90, 60, 40, 1).next_claim(2000, 4), None);
    }

    #[test]
    fn a_claim_in_flight_blocks_a_small_second_claim() {
        // Target 1,000 with a batch of 2,000: a share is the whole target. With one claim
        // in flight, a second one starts only for at least half a share.
        assert_eq!(wanted(50, 950, 0, 400, 1).next_claim(2000, 4), Some(600));
        assert_eq!(wanted(50, 950, 500, 400, 1).next_claim(2000, 4), None);
        // Alone, the same 100 missing are claimed at once.
        assert_eq!(wanted(50, 950, 900, 0, 0).next_claim(2000, 4), Some(100));
    }

    #[test]
    fn claims_never_exceed_the_batch() {
        assert_eq!(wanted(500, 5000, 0, 0, 0).next_claim(1000, 1), Some(1000));
        assert_eq!(
            wanted(500, 5000, 0, 1000, 1).next_claim(1000, 4),
            Some(1000)
        );
    }
}
