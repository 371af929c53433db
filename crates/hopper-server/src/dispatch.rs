//! Dispatch: claiming jobs for the credit workers have free, placing each job with a worker
//! that serves its queue and kind, and dropping workers that went silent.
//!
//! The free credit per queue, the kinds to claim and the worker for each job come from the
//! roster ([`crate::roster`]), kept up to date as orders are sent and outcomes come back:
//! a claim and the placing of its jobs cost the same with 5 workers or 5,000. A job goes
//! to the worker with the most free credit that serves its queue and kind; among equals,
//! to the one whose last order is oldest, so idle workers take turns.
//!
//! One claim runs at a time, for one queue, sized to the free credit of the workers that
//! serve that queue (capped at `claim_batch`), so a worker is never promised the same slot
//! twice. Queues take turns. A short claim means the queue is drained: it is not claimed
//! from again until a notification, a poll tick, or a resync says it may have jobs.
//!
//! When every worker with room in a queue declared the kinds it runs, only jobs of those
//! kinds are claimed ([`hopper_core::ClaimParams::kinds`]): jobs that no connected
//! worker runs stay in the queue untouched. A claimed job whose kind no worker with free
//! credit declares all the same (the worker set changed during the claim) is snoozed for
//! `unplaceable_delay`: back in the queue without using an attempt.

use std::collections::HashMap;

use hopper_core::{
    ClaimParams, ClaimedJob, Finish, JobId, JobListParams, JobState, Lease, Outcome, Result,
};
use hopper_protocol::{Order, Reply};
use tokio::time::Instant;

use crate::convert;
use crate::server::{Core, Event, Held, PeerId, REPROBE_AFTER, hex};
use hopper_core::log_limit::capped;

/// Most jobs in one `orders` push: each job's arguments may be up to 1 MiB, so a push
/// stays within reason for the peer's reader.
pub(crate) const ORDERS_PER_PUSH: usize = 100;
use crate::tasks;

impl Core {
    /// Starts a claim if some queue with free worker credit may have jobs.
    pub(crate) fn dispatch(&mut self) {
        // A fenced server may have been taken for vanished: it claims nothing for now.
        // Every queue a peer serves is in `hot` (a hello adds it, the sweep forgets only
        // queues nobody serves), so with none hot there is nothing to claim. This runs after
        // every message (thousands of idle workers' heartbeats), so it reads only the
        // roster's totals per queue, never the workers one by one.
        if self.claiming
            || self.fenced.load(std::sync::atomic::Ordering::Acquire)
            || !self.hot.values().any(|hot| *hot)
        {
            return;
        }
        let roster = self.peers.roster();
        let candidates: Vec<(&str, usize)> = roster
            .queues_with_credit()
            .filter(|(q, _)| self.hot.get(*q).copied().unwrap_or(true))
            .collect();
        if candidates.is_empty() {
            return;
        }
        let (queue, free) = candidates[self.next_queue % candidates.len()];
        self.next_queue = self.next_queue.wrapping_add(1);
        let limit = free.min(self.config.claim_batch.max(1));
        let params = ClaimParams {
            queue: queue.to_owned(),
            node: self.config.node_id,
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
            lease: self.config.lease,
            kinds: roster.kinds_for(queue),
        };
        // Before every claim in debug builds (tests): the index agrees with a full recount.
        debug_assert!(
            self.peers.consistent(),
            "the roster disagrees with a recount of the peers"
        );
        self.claiming = true;
        self.claim_woken = false;
        let backend = self.backend.clone();
        let events = self.events.clone();
        tokio::spawn(async move {
            let result = backend.job_claim(&params).await;
            let _ = events
                .send(Event::Claimed {
                    queue: params.queue,
                    limit,
                    result,
                })
                .await;
        });
    }

    /// Places claimed jobs with workers.
    pub(crate) fn on_claimed(
        &mut self,
        queue: String,
        limit: usize,
        result: Result<Vec<ClaimedJob>>,
    ) {
        self.claiming = false;
        let jobs = match result {
            Ok(jobs) => jobs,
            // The database away is expected to pass (warn); anything else will not, and is
            // said at error level (the maintenance services stop the process on it).
            Err(e) if e.is_transient() => {
                tracing::warn!(error = %convert::detail(&e), %queue, "claim failed; retrying at the next poll");
                self.active.insert(queue.clone());
                self.hot.insert(queue, false);
                return;
            }
            Err(e) => {
                tracing::error!(error = %convert::detail(&e), %queue, "claim failed, not for a lost connection; retrying at the next poll");
                self.active.insert(queue.clone());
                self.hot.insert(queue, false);
                return;
            }
        };
        if !jobs.is_empty() {
            self.active.insert(queue.clone());
        }
        if jobs.len() < limit && !self.claim_woken {
            self.hot.insert(queue, false);
        }
        let now = Instant::now();
        for job in &jobs {
            self.saw(job.lease.job_id);
        }
        let mut orders: HashMap<PeerId, Vec<Order>> = HashMap::new();
        for job in jobs {
            match self.peers.roster().pick(&job.queue, &job.kind).cloned() {
                Some(peer) => {
                    let held = Held {
                        attempt: job.lease.attempt,
                        counted_attempt: job.counted_attempt,
                        sent_at: now,
                        deadline: Some(now + job.timeout + self.config.heartbeat * 2),
                    };
                    self.peers.hold(&peer, job.lease.job_id, held);
                    orders.entry(peer).or_default().push(Order::from(&job));
                }
                None => {
                    tracing::debug!(job_id = %job.lease.job_id, kind = %job.kind, queue = %job.queue,
                        "no connected worker with free credit takes this kind; putting it back");
                    self.queue_own_finish(Finish {
                        lease: job.lease,
                        outcome: Outcome::Snoozed {
                            retry_in: self.config.unplaceable_delay,
                        },
                    });
                }
            }
        }
        for (peer, jobs) in orders {
            self.send_orders(&peer, jobs);
        }
    }

    /// Sends a worker its orders: in `orders` pushes of up to [`ORDERS_PER_PUSH`] if it
    /// said `batch` in its hello, one `order` each otherwise.
    fn send_orders(&self, peer: &PeerId, mut jobs: Vec<Order>) {
        if !self.peers.get(peer).is_some_and(|p| p.batch) {
            for job in jobs {
                self.reply(peer, Reply::Order { job });
            }
            return;
        }
        while !jobs.is_empty() {
            let rest = jobs.split_off(jobs.len().min(ORDERS_PER_PUSH));
            self.reply(peer, Reply::Orders { jobs });
            jobs = rest;
        }
    }

    /// Drops peers silent for three heartbeat periods; every `node_beat` (once per period),
    /// also enforces timeouts, publishes the server's node row for its heartbeat and
    /// forgets queues nobody serves. Runs five times per heartbeat period, so a silent peer goes within 3.2
    /// periods.
    pub(crate) fn sweep(&mut self, node_beat: bool) {
        let now = Instant::now();
        let dead_after = self.config.heartbeat * 3;
        let silent: Vec<_> = self
            .peers
            .iter()
            .filter(|(_, p)| now.duration_since(p.last_seen) > dead_after)
            .map(|(id, _)| id.clone())
            .collect();
        for id in silent {
            self.drop_peer(&id, now, Gone::Silent);
        }
        // Listed while no claim is under way (and none starts until the list is back), so
        // every running job of this node the list shows is either seen or inherited.
        if self.inherit_at.is_some_and(|at| now >= at) && !self.claiming {
            self.inherit_at = None;
            self.claiming = true;
            self.find_inherited();
        }
        if !node_beat {
            return;
        }
        // Once per period: it reads every held order, and a timeout has two periods of grace.
        self.enforce_timeouts(now);
        self.node
            .send_replace(tasks::node_info(&self.config, &self.peers));
        crate::recording::peers_and_orders(&self.peers);
        // Forget queues nobody serves any more.
        let served: HashMap<&str, ()> = self
            .peers
            .values()
            .flat_map(|p| p.queues().iter().map(|q| (q.as_str(), ())))
            .collect();
        self.hot.retain(|q, _| served.contains_key(q.as_str()));
        self.active.retain(|q| served.contains_key(q.as_str()));
    }

    /// A connection closed: probes every worker now, and again after [`REPROBE_AFTER`]
    /// (one second probe covers every close until then).
    pub(crate) fn on_connection_closed(&mut self) {
        if self.reprobing {
            return;
        }
        self.probe_workers();
        self.reprobing = true;
        let events = self.events.clone();
        tokio::spawn(async move {
            tokio::time::sleep(REPROBE_AFTER).await;
            let _ = events.send(Event::Reprobe).await;
        });
    }

    /// Sends every worker a message it ignores (a `heartbeat_ack` for no request, with
    /// nothing lost): the transport answers [`Event::PeerGone`] for each whose connection
    /// is gone. Clients hold no orders and are left to the silence sweep.
    pub(crate) fn probe_workers(&self) {
        for (id, p) in self.peers.iter() {
            if p.role() == hopper_protocol::Role::Worker {
                let probe = Reply::HeartbeatAck {
                    req: 0,
                    lost: Vec::new(),
                };
                self.reply(id, probe);
            }
        }
    }

    /// Ends a peer's session: it went silent, or its connection closed. The orders it held
    /// are taken back at once: released without counting the attempt when it said `bye`
    /// (it left on purpose), failed and retried at once otherwise (its worker vanished
    /// mid-run: the attempt counts). Its requests still waiting for their turn are not run
    /// (nobody is left to answer), so they cannot wait for ever behind its stuck ones.
    pub(crate) fn drop_peer(&mut self, id: &PeerId, now: Instant, why: Gone) {
        let Some(p) = self.peers.remove(id) else {
            return;
        };
        self.requests.close_line(id);
        let silence = now.duration_since(p.last_seen);
        let name = capped(&p.name);
        let held = p.held();
        if p.leaving {
            tracing::info!(peer = %hex(id), %name, jobs = held.len(), "peer left after bye");
        } else if p.role() != hopper_protocol::Role::Worker && held.is_empty() {
            tracing::info!(peer = %hex(id), %name, ?silence, "idle client's session ended");
        } else if why == Gone::Closed {
            tracing::warn!(peer = %hex(id), %name, jobs = held.len(), "peer's connection closed; dropped");
        } else {
            tracing::warn!(peer = %hex(id), %name, jobs = held.len(), ?silence, "peer went silent; dropped");
        }
        for (&job_id, held) in held {
            let lease = Lease {
                job_id,
                attempt: held.attempt,
            };
            let outcome = if p.leaving {
                Outcome::Released
            } else {
                let error = match why {
                    Gone::Silent => format!(
                        "worker {} went silent ({} ms without a message); retrying elsewhere",
                        p.name,
                        silence.as_millis()
                    ),
                    Gone::Closed => {
                        format!("worker {}'s connection closed; retrying elsewhere", p.name)
                    }
                };
                Outcome::Retry {
                    error,
                    retry_in: std::time::Duration::ZERO,
                    duration_ms: 0,
                }
            };
            self.queue_own_finish(Finish { lease, outcome });
        }
    }

    /// Marks queues to claim from at a poll tick: those whose last claim found jobs or
    /// whose workers reported outcomes since the last tick (a limit may have room again),
    /// and one more served queue in turn, as a safety net for a wake-up that never came.
    /// An idle server thus runs at most one claim per tick, however many queues it serves.
    pub(crate) fn poll(&mut self) {
        for q in self.active.drain() {
            if let Some(hot) = self.hot.get_mut(&q) {
                *hot = true;
            }
        }
        if self.hot.is_empty() {
            return;
        }
        let turn = self.poll_turn % self.hot.len();
        self.poll_turn = self.poll_turn.wrapping_add(1);
        if let Some(hot) = self.hot.values_mut().nth(turn) {
            *hot = true;
        }
    }

    /// Lists the jobs still leased under this node id: after a restart, those held by an
    /// earlier run of this server.
    fn find_inherited(&self) {
        let backend = self.backend.clone();
        let events = self.events.clone();
        let node = self.config.node_id;
        tokio::spawn(async move {
            let mut leases = Vec::new();
            let mut before = None;
            loop {
                let params = JobListParams {
                    state: Some(JobState::Running),
                    before,
                    limit: 1000,
                    ..JobListParams::default()
                };
                let page = match backend.job_list(&params).await {
                    Ok(page) => page,
                    Err(e) => {
                        tracing::warn!(error = %e.with_causes(), "listing inherited leases failed; they will expire");
                        let _ = events.send(Event::Inherited(Vec::new())).await;
                        return;
                    }
                };
                before = page.last().map(|j| j.id);
                leases.extend(
                    page.iter()
                        .filter(|j| j.node_id == Some(node))
                        .map(|j| Lease {
                            job_id: j.id,
                            attempt: j.attempt,
                        }),
                );
                if page.len() < 1000 {
                    break;
                }
            }
            let _ = events.send(Event::Inherited(leases)).await;
        });
    }

    /// Releases (no penalty) inherited leases that no worker has listed in a heartbeat since
    /// the restart: orders that were on the wire when the server stopped, or whose workers
    /// did not come back. Without this they would wait for their lease to expire.
    pub(crate) fn on_inherited(&mut self, leases: Vec<Lease>) {
        self.claiming = false;
        let seen = self.seen.take().unwrap_or_default();
        let orphans: Vec<Lease> = leases
            .into_iter()
            .filter(|l| self.peers.holder(&l.job_id).is_none() && !seen.contains(&l.job_id))
            .collect();
        if orphans.is_empty() {
            return;
        }
        tracing::info!(
            jobs = orphans.len(),
            "releasing jobs leased by an earlier run of this server that no worker claimed"
        );
        for lease in orphans {
            self.queue_own_finish(Finish {
                lease,
                outcome: Outcome::Released,
            });
        }
    }

    /// Fails the orders held past their timeout (plus grace): the worker is told to stop
    /// (`cancel`) and the attempt is recorded as timed out and retried. Workers that enforce
    /// timeouts themselves (the Rust runtime) report first; this catches those that cannot
    /// (a Python thread cannot be stopped) or hang.
    fn enforce_timeouts(&mut self, now: Instant) {
        let late: Vec<(PeerId, JobId)> = self
            .peers
            .iter()
            .flat_map(|(peer, p)| {
                p.held()
                    .iter()
                    .filter(|(_, h)| h.deadline.is_some_and(|d| d <= now))
                    .map(|(id, _)| (peer.clone(), *id))
            })
            .collect();
        for (peer, job_id) in late {
            let Some(h) = self.peers.release(&peer, &job_id) else {
                continue;
            };
            let ran = now.duration_since(h.sent_at);
            tracing::warn!(%job_id, attempt = h.attempt, ?ran, "job timed out on its worker; cancelling and retrying it");
            self.reply(&peer, Reply::Cancel { id: job_id });
            self.queue_own_finish(Finish {
                    lease: Lease {
                        job_id,
                        attempt: h.attempt,
                    },
                    outcome: Outcome::Retry {
                        error: format!(
                            "timed out: still running {} ms after it was sent, past its timeout (enforced by the server)",
                            ran.as_millis()
                        ),
                        retry_in: convert::default_backoff(h.counted_attempt),
                        duration_ms: i64::try_from(ran.as_millis()).unwrap_or(i64::MAX),
                    },
            });
        }
    }
}

/// Why a peer's session ends without a `bye`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gone {
    /// Nothing heard for three heartbeat periods.
    Silent,
    /// Its connection closed (a message to it found no connection).
    Closed,
}
