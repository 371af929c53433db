//! Leases through the server: a worker's `heartbeat` extends every lease it lists in one
//! statement (those another peer holds are answered lost), adopts the leases of an earlier
//! run of this server and takes back orders that never reached it; `extend` moves one
//! lease (`docs/protocol.md`).

use std::collections::HashSet;
use std::time::Duration;

use hopper_core::backend::{Finish, JobExtendManyParams};
use hopper_core::{Backend, JobId, Lease, NodeId, Outcome, Result};
use hopper_protocol::{FinishResult, LeaseRef, Reply};
use tokio::time::Instant;

use super::outcomes::{as_lease, own_leases};
use super::{Core, Event, Held, PeerId, hex};
use crate::convert;

/// The error of a heartbeat that came while its peer's last one was still extending.
const HEARTBEAT_BUSY: &str =
    "the last heartbeat's leases are still being extended; this one changed nothing";

impl Core {
    /// Extends one lease in the database and acknowledges it. A lease no peer holds
    /// (`unheld`) is extended only if this server's node holds it: another node's job is
    /// not this peer's to keep.
    pub(super) fn extend(&self, peer: PeerId, req: u64, lease: Lease, by: Duration, unheld: bool) {
        let (backend, node) = (self.backend.clone(), self.config.node_id);
        self.spawn_reply(peer, req, async move {
            if unheld && !own_leases(&*backend, node, vec![lease]).await?.contains(&lease) {
                tracing::debug!(job_id = %lease.job_id, attempt = lease.attempt, "refused an extend for a lease this server's node does not hold");
                let result = FinishResult::LeaseLost;
                return Ok(Reply::Ack { req, result });
            }
            let lost = backend
                .job_extend_many(&JobExtendManyParams {
                    leases: vec![lease],
                    by,
                })
                .await?;
            let result = if lost.is_empty() {
                FinishResult::Recorded
            } else {
                FinishResult::LeaseLost
            };
            Ok(Reply::Ack { req, result })
        });
    }

    /// A worker's heartbeat: keeps the leases it lists that are its own (in one
    /// `job_extend_many`, answered by [`Event::HeartbeatDone`]), adopts those of an earlier
    /// run of this server, and takes back orders it never got.
    pub(super) fn on_heartbeat(
        &mut self,
        peer: PeerId,
        req: u64,
        leases: Vec<LeaseRef>,
        now: Instant,
    ) {
        // Generous, so an order merely slow to arrive on a loaded machine is not taken back.
        let stale_after = (self.config.heartbeat * 3).max(Duration::from_secs(5));
        // Leases another connected peer holds are not this peer's to keep alive: lost.
        let (leases, foreign): (Vec<LeaseRef>, Vec<LeaseRef>) = leases
            .into_iter()
            .partition(|l| self.held_elsewhere(&peer, l.id).is_none());
        if !foreign.is_empty() {
            tracing::warn!(peer = %hex(&peer), jobs = foreign.len(), "refused a heartbeat for jobs leased to another peer");
        }
        // One extend of a peer's leases at a time, beside its other requests rather than in
        // their line: a heartbeat must not wait behind the worker's own logs and submits
        // stuck on a lock (its leases would expire and its jobs run twice), and a peer
        // heartbeating faster than the database answers must not start a statement for
        // each, every one waiting for a connection of the pool that claims and outcomes
        // use. A heartbeat while the last one's extend still runs is refused as busy before
        // anything changes; the running one keeps the leases.
        if !leases.is_empty() && !self.extending.insert(peer.clone()) {
            return self.reply(&peer, Reply::transient(Some(req), HEARTBEAT_BUSY));
        }
        // Inherited: leases of an earlier run of this server (its map starts empty), known
        // while they are pending and only if this run never claimed, saw or had them
        // reported. A lease this run sent is listed until its outcome's ack arrives, after
        // the outcome freed its slot: holding it again would take a slot of the worker's
        // credit (a claimed job then put back) until it went stale. Those this peer's last
        // heartbeat could not adopt (the database failed) are tried again: they are seen
        // (not released as nobody's), so nothing else would adopt them.
        let unadopted = self.peers.get(&peer).map(|p| &p.unadopted);
        let inherited: HashSet<JobId> = leases
            .iter()
            .filter(|l| {
                self.seen.as_ref().is_some_and(|seen| !seen.contains(&l.id))
                    || unadopted.is_some_and(|u| u.contains(&l.id))
            })
            .map(|l| l.id)
            .collect();
        for l in &leases {
            self.saw(l.id);
        }
        if !self.peers.contains(&peer) {
            return;
        }
        // Adopt what the worker holds of an earlier run ... once the database says this
        // node holds it (below), not before: an order adopted may be reported without a
        // lookup. (A lease of another attempt than the order it holds is not that order:
        // the database answers it lost, and the order stays held, to be listed with its own
        // attempt.)
        let listed: HashSet<(JobId, i32)> = leases.iter().map(|l| (l.id, l.attempt)).collect();
        // Leases no peer holds nor is writing the outcome of are looked up first, extended
        // only if this server's node holds them: another node's job is not this peer's to
        // keep alive (nor, adopted, to report).
        let unheld: Vec<Lease> = leases
            .iter()
            .filter(|l| {
                self.peers.held_attempt(&peer, &l.id).is_none()
                    && !self.writing.contains(&(l.id, l.attempt))
            })
            .map(|l| as_lease((l.id, l.attempt)))
            .collect();
        let adopt: HashSet<Lease> = unheld
            .iter()
            .filter(|l| inherited.contains(&l.job_id))
            .copied()
            .collect();
        // ... and take back orders it never got (sent to a connection that died).
        let unknown: Vec<JobId> = self
            .peers
            .get(&peer)
            .map(|p| {
                p.held()
                    .iter()
                    .filter(|(id, h)| {
                        !listed.contains(&(**id, h.attempt))
                            && now.duration_since(h.sent_at) > stale_after
                    })
                    .map(|(id, _)| *id)
                    .collect()
            })
            .unwrap_or_default();
        let unknown: Vec<(JobId, Held)> = unknown
            .into_iter()
            .filter_map(|id| Some((id, self.peers.release(&peer, &id)?)))
            .collect();
        for (id, h) in unknown {
            tracing::info!(job_id = %id, "an order never reached its worker; releasing it");
            let lease = Lease {
                job_id: id,
                attempt: h.attempt,
            };
            self.queue_own_finish(Finish {
                lease,
                outcome: Outcome::Released,
            });
        }
        if leases.is_empty() {
            // It holds nothing: nothing is left to adopt.
            if self
                .peers
                .get(&peer)
                .is_some_and(|p| !p.unadopted.is_empty())
            {
                self.peers.update(&peer, |p| p.unadopted.clear());
            }
            return self.reply(&peer, Reply::HeartbeatAck { req, lost: foreign });
        }
        let as_lease = |l: &LeaseRef| as_lease((l.id, l.attempt));
        let extend = JobExtendManyParams {
            leases: leases.iter().map(as_lease).collect(),
            by: self.config.lease,
        };
        let foreign: Vec<Lease> = foreign.iter().map(as_lease).collect();
        let (backend, node) = (self.backend.clone(), self.config.node_id);
        let events = self.events.clone();
        tokio::spawn(async move {
            let done = extend_own(&*backend, node, extend, unheld).await;
            let (lost, adopt) = match done {
                Ok((mut lost, not_own)) => {
                    let lost_now: HashSet<Lease> = lost.iter().copied().collect();
                    let adopt = adopt
                        .into_iter()
                        .filter(|l| !not_own.contains(l) && !lost_now.contains(l))
                        .collect();
                    lost.extend(not_own);
                    lost.extend(foreign);
                    (Ok(lost), adopt)
                }
                // Adopted at the next heartbeat, which looks them up again.
                Err(e) => (Err(e), adopt.into_iter().collect()),
            };
            let done = Event::HeartbeatDone {
                peer,
                req,
                lost,
                adopt,
            };
            let _ = events.send(done).await;
        });
    }

    /// Answers a heartbeat once its leases are extended, releasing those it lost and
    /// adopting those of an earlier run of this server (`adopt`) that no peer holds now.
    /// When extending failed, `adopt` are those it listed to adopt: its next heartbeat
    /// tries them again.
    pub(super) fn on_heartbeat_done(
        &mut self,
        peer: PeerId,
        req: u64,
        lost: Result<Vec<Lease>>,
        adopt: Vec<Lease>,
    ) {
        self.extending.remove(&peer);
        let (adopt, unadopted): (Vec<Lease>, HashSet<JobId>) = match &lost {
            Ok(_) => (adopt, HashSet::new()),
            Err(_) => (Vec::new(), adopt.iter().map(|l| l.job_id).collect()),
        };
        let had = self
            .peers
            .get(&peer)
            .is_some_and(|p| !p.unadopted.is_empty());
        if had || !unadopted.is_empty() {
            self.peers.update(&peer, |p| p.unadopted = unadopted);
        }
        let now = Instant::now();
        for l in adopt {
            let free = self.peers.holder(&l.job_id).is_none()
                && !self.writing.contains(&(l.job_id, l.attempt));
            if free && self.peers.contains(&peer) {
                let held = Held {
                    attempt: l.attempt,
                    counted_attempt: 1,
                    sent_at: now,
                    deadline: None,
                };
                self.peers.hold(&peer, l.job_id, held);
            }
        }
        match lost {
            Ok(lost) => {
                for l in &lost {
                    if self.peers.held_attempt(&peer, &l.job_id) == Some(l.attempt) {
                        self.peers.release(&peer, &l.job_id);
                    }
                }
                let lost = lost
                    .iter()
                    .map(|l| LeaseRef {
                        id: l.job_id,
                        attempt: l.attempt,
                    })
                    .collect();
                self.reply(&peer, Reply::HeartbeatAck { req, lost });
            }
            Err(e) => {
                tracing::warn!(error = %convert::detail(&e), "extending leases failed");
                self.reply(&peer, Reply::failure(Some(req), &e));
            }
        }
    }
}

/// Extends the leases of `extend` but those of `unheld` this server's node does not hold,
/// which are looked up first: the leases lost, and apart those not this node's.
async fn extend_own(
    backend: &dyn Backend,
    node: NodeId,
    mut extend: JobExtendManyParams,
    unheld: Vec<Lease>,
) -> Result<(Vec<Lease>, HashSet<Lease>)> {
    let own = own_leases(backend, node, unheld.clone()).await?;
    let not_own: HashSet<Lease> = unheld.into_iter().filter(|l| !own.contains(l)).collect();
    extend.leases.retain(|l| !not_own.contains(l));
    let lost = backend.job_extend_many(&extend).await?;
    Ok((lost, not_own))
}
