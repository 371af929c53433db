//! `outcomes`: many orders' outcomes in one message, written with the other outcomes
//! waiting (one statement per kind of outcome) and acknowledged in one `acks`.

use std::time::Duration;

use hopper_core::{Finish, JobId, Lease, Outcome};
use hopper_protocol::{Completed, ErrorCode, Failed, FinishResult, OutcomeItem, Reply};

use super::{Core, PeerId, hex};
use crate::convert;
use crate::outcome_writer::ReplyTo;

impl Core {
    /// Frees the worker's credit for every outcome now and queues the writes. An outcome
    /// for a job another connected peer holds is refused (`lease_lost`), as a single one is,
    /// and so is a second outcome for one lease. An item out of bounds refuses the whole
    /// message (`invalid`): nothing of it is written.
    pub(super) fn on_outcomes(&mut self, peer: PeerId, req: u64, items: Vec<OutcomeItem>) {
        let checked = items
            .iter()
            .enumerate()
            .try_for_each(|(i, item)| item.check().map_err(|e| format!("outcome {i}: {e}")));
        if let Err(message) = checked {
            let reply = Reply::error(Some(req), ErrorCode::Invalid, message);
            return self.reply(&peer, reply);
        }
        let place = match self.place_for_unheld(&peer, items.iter().map(OutcomeItem::lease)) {
            Ok(place) => place,
            Err(busy) => return self.reply(&peer, Reply::transient(Some(req), busy)),
        };
        let mut finishes = Vec::with_capacity(items.len());
        let mut preset = Vec::with_capacity(items.len());
        for item in items {
            let id = item.lease().0;
            if let Some(holder) = self.held_elsewhere(&peer, id) {
                tracing::warn!(peer = %hex(&peer), holder = %hex(holder), job_id = %id, "refused an outcome for a job leased to another peer");
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
            let results = preset
                .into_iter()
                .map(|r| r.unwrap_or(FinishResult::LeaseLost))
                .collect();
            return self.reply(&peer, Reply::Acks { req, results });
        }
        self.queue_finishes(finishes, ReplyTo::Acks(peer, req, preset), place);
    }

    /// The write for one outcome of `peer`'s, whose order (if it held it) is no longer
    /// outstanding. `None` (`lease_lost`) when an outcome for the same lease is already
    /// queued (only the first counts), or when the peer holds the job under another attempt:
    /// a late outcome of an earlier attempt, or a wrong one, is not the order's, which stays
    /// held and its credit taken.
    pub(super) fn take_finish(&mut self, peer: &PeerId, item: OutcomeItem) -> Option<Finish> {
        let (id, attempt) = item.lease();
        if self.holds_other_attempt(peer, id, attempt) {
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

impl Core {
    /// Whether `peer` holds order `id` under another attempt than `attempt`.
    pub(super) fn holds_other_attempt(&self, peer: &PeerId, id: JobId, attempt: i32) -> bool {
        self.peers
            .get(peer)
            .and_then(|p| p.held().get(&id))
            .is_some_and(|held| held.attempt != attempt)
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
