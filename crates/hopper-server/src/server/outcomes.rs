//! `outcomes`: many orders' outcomes in one message, written with the other outcomes
//! waiting (one statement per kind of outcome) and acknowledged in one `acks`.

use std::collections::HashSet;
use std::time::Duration;

use hopper_core::backend::JobLeasesOfNodeParams;
use hopper_core::{Backend, Finish, JobId, Lease, NodeId, Outcome, Result};
use hopper_protocol::{Completed, ErrorCode, Failed, FinishResult, OutcomeItem, Reply};

use super::{Core, Event, PeerId, hex};
use crate::convert;
use crate::in_flight::Permit;
use crate::outcome_writer::ReplyTo;

/// Outcomes a peer reported in one message: one (`completed`, `failed`, `snoozed`,
/// `released`, answered by an `ack`) or many (`outcomes`, answered by an `acks`).
pub(crate) struct Report {
    pub req: u64,
    pub items: Vec<OutcomeItem>,
    /// One outcome, answered by an `ack`.
    pub single: bool,
}

impl Core {
    /// `outcomes`: an item out of bounds refuses the whole message (`invalid`): nothing of
    /// it is written. Otherwise as [`Core::on_report`].
    pub(super) fn on_outcomes(&mut self, peer: PeerId, req: u64, items: Vec<OutcomeItem>) {
        let checked = items
            .iter()
            .enumerate()
            .try_for_each(|(i, item)| item.check().map_err(|e| format!("outcome {i}: {e}")));
        if let Err(message) = checked {
            let reply = Reply::error(Some(req), ErrorCode::Invalid, message);
            return self.reply(&peer, reply);
        }
        let report = Report {
            req,
            items,
            single: false,
        };
        self.on_report(peer, report);
    }

    /// Frees the worker's credit for every outcome and queues the writes. An outcome for a
    /// job another connected peer holds is refused (`lease_lost`), and so is a second
    /// outcome for one lease. Outcomes for leases no peer holds (the restart case: orders
    /// of an earlier run of this server) are looked up first, in the database: only those
    /// running under this server's node are taken, the others (another node's jobs, or
    /// ended attempts) are refused. The lookup takes a place among the peer's requests in
    /// flight, kept until the outcomes are answered: the outcomes of held orders are
    /// bounded by the credit granted, those of unheld leases only by this; past the bounds
    /// the message is refused as busy, nothing of it taken. The lookup runs even if the
    /// peer's session ends while it waits its turn, and its outcomes are taken as those of
    /// the orders it held are: what it sent before it went counts.
    pub(super) fn on_report(&mut self, peer: PeerId, report: Report) {
        let unheld: Vec<Lease> = report
            .items
            .iter()
            .map(|item| as_lease(item.lease()))
            .filter(|l| {
                self.peers.holder(&l.job_id).is_none()
                    && !self.writing.contains(&(l.job_id, l.attempt))
            })
            .collect();
        if unheld.is_empty() {
            return self.take_report(peer, report, &HashSet::new(), None);
        }
        let queued = match self.requests.try_queue(&peer) {
            Ok(queued) => queued,
            Err(busy) => return self.reply(&peer, Reply::transient(Some(report.req), busy)),
        };
        let (backend, node) = (self.backend.clone(), self.config.node_id);
        let (events, out) = (self.events.clone(), self.out.clone());
        tokio::spawn(async move {
            let running = queued.turn_kept().await;
            match own_leases(&*backend, node, unheld).await {
                Ok(own) => {
                    let place = running.into_place();
                    let checked = Event::Checked {
                        peer,
                        report,
                        own,
                        place,
                    };
                    let _ = events.send(checked).await;
                }
                Err(e) => {
                    let reply = Reply::failure(Some(report.req), &e);
                    let _ = out.send((peer, reply)).await;
                }
            }
        });
    }

    /// Takes the outcomes of `report` and queues their writes (holding `place` until they
    /// are answered); `own` are the leases no peer held found running under this node.
    pub(super) fn take_report(
        &mut self,
        peer: PeerId,
        report: Report,
        own: &HashSet<Lease>,
        place: Option<Permit>,
    ) {
        let Report { req, items, single } = report;
        let mut finishes = Vec::with_capacity(items.len());
        let mut preset = Vec::with_capacity(items.len());
        for item in items {
            let lease = as_lease(item.lease());
            let id = lease.job_id;
            if let Some(holder) = self.held_elsewhere(&peer, id) {
                tracing::warn!(peer = %hex(&peer), holder = %hex(holder), job_id = %id, "refused an outcome for a job leased to another peer");
                preset.push(Some(FinishResult::LeaseLost));
                continue;
            }
            let unheld =
                self.peers.holder(&id).is_none() && !self.writing.contains(&(id, lease.attempt));
            if unheld && !own.contains(&lease) {
                self.refused_foreign(&peer, lease, "an outcome");
                preset.push(Some(FinishResult::LeaseLost));
                continue;
            }
            match self.take_finish(&peer, item) {
                Some(finish) => {
                    finishes.push(finish);
                    preset.push(None);
                }
                None => preset.push(Some(FinishResult::LeaseLost)),
            }
        }
        if finishes.is_empty() {
            // Nothing to write: answered now, not queued behind the writes.
            let mut results = preset
                .into_iter()
                .map(|r| r.unwrap_or(FinishResult::LeaseLost));
            let reply = match single {
                true => Reply::Ack {
                    req,
                    result: results.next().unwrap_or(FinishResult::LeaseLost),
                },
                false => Reply::Acks {
                    req,
                    results: results.collect(),
                },
            };
            return self.reply(&peer, reply);
        }
        let reply_to = match single {
            true => ReplyTo::Ack(peer, req),
            false => ReplyTo::Acks(peer, req, preset),
        };
        self.queue_finishes(finishes, reply_to, place);
    }

    /// Logs (at most once per interval) the refusal of `what` for a lease no peer holds and
    /// this server's node does not run: another node's job, or an attempt that ended.
    pub(super) fn refused_foreign(&mut self, peer: &PeerId, lease: Lease, what: &str) {
        if let Some(held_back) = self.foreign_refusals.check() {
            tracing::warn!(peer = %hex(peer), job_id = %lease.job_id, attempt = lease.attempt, held_back, "refused {what} for a lease this server's node does not hold");
        }
    }

    /// The write for one outcome of `peer`'s, whose order (if it held it) is no longer
    /// outstanding. `None` (`lease_lost`) when an outcome for the same lease is already
    /// queued (only the first counts), or when the peer holds the job under another attempt:
    /// a late outcome of an earlier attempt, or a wrong one, is not the order's, which stays
    /// held and its credit taken.
    pub(super) fn take_finish(&mut self, peer: &PeerId, item: OutcomeItem) -> Option<Finish> {
        let (id, attempt) = item.lease();
        if self
            .peers
            .held_attempt(peer, &id)
            .is_some_and(|held| held != attempt)
        {
            return None;
        }
        self.saw(id);
        let lease = Lease {
            job_id: id,
            attempt,
        };
        if !self.start_writing(lease) {
            return None;
        }
        // Its queues are claimed from at the next poll tick: a limit may have room again.
        if let Some(p) = self.peers.get(peer) {
            for q in p.queues() {
                if !self.active.contains(q) {
                    self.active.insert(q.clone());
                }
            }
        }
        let held = self.peers.release(peer, &id);
        // Its last log lines may come after the outcome.
        self.peers.allow_logs(peer, lease);
        if let (Some(_), Some(ran)) = (held, ran(&item)) {
            self.peers.update(peer, |p| p.pace.record(ran));
        }
        let counted = held.map_or(1, |h| h.counted_attempt);
        let finish = Finish {
            lease,
            outcome: outcome(item, counted),
        };
        crate::recording::outcome_taken(&finish.outcome);
        Some(finish)
    }
}

/// How long the job of an outcome ran, for the worker's pace: the reported whole
/// milliseconds plus half of one, since a job of 0.9 ms reports 0 (so the mean is not
/// biased low); a negative figure counts as 0. `None` for outcomes of jobs that did not run (snoozed, released).
fn ran(item: &OutcomeItem) -> Option<Duration> {
    match item {
        OutcomeItem::Completed(Completed { duration_ms, .. })
        | OutcomeItem::Failed(Failed { duration_ms, .. }) => {
            let ms = u64::try_from(*duration_ms).unwrap_or(0);
            Some(Duration::from_millis(ms) + Duration::from_micros(500))
        }
        OutcomeItem::Snoozed(_) | OutcomeItem::Released(_) => None,
    }
}

/// An error text as it can be stored: PostgreSQL text cannot hold U+0000, and a write that
/// fails on one would be retried for ever, so each becomes U+FFFD.
fn storable(error: String) -> String {
    if error.contains('\0') {
        error.replace('\0', "\u{FFFD}")
    } else {
        error
    }
}

/// What an item says, as the storage seam takes it, its error text storable.
fn outcome(item: OutcomeItem, counted_attempt: i32) -> Outcome {
    match item.into_outcome(|| convert::default_backoff(counted_attempt)) {
        Outcome::Retry {
            error,
            retry_in,
            duration_ms,
        } => Outcome::Retry {
            error: storable(error),
            retry_in,
            duration_ms,
        },
        Outcome::Failed { error, duration_ms } => Outcome::Failed {
            error: storable(error),
            duration_ms,
        },
        other => other,
    }
}

/// A lease as the wire names it, `(id, attempt)`.
pub(super) fn as_lease((job_id, attempt): (JobId, i32)) -> Lease {
    Lease { job_id, attempt }
}

/// Of `leases`, none held by a peer of this server, those running under its `node`: the
/// only ones a peer may report or extend (the orders of an earlier run of this server,
/// whose node id is the same). A backend without [`hopper_core::MaintenanceStore`] cannot
/// say, and none is.
pub(super) async fn own_leases(
    backend: &dyn Backend,
    node: NodeId,
    leases: Vec<Lease>,
) -> Result<HashSet<Lease>> {
    let Some(maintenance) = backend.maintenance() else {
        return Ok(HashSet::new());
    };
    let params = JobLeasesOfNodeParams { node, leases };
    Ok(maintenance
        .job_leases_of_node(&params)
        .await?
        .into_iter()
        .collect())
}
