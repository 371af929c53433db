//! The batching outcome writer: outcomes of every peer (and the server's own: a silent
//! worker's, a timeout, a release) written in batches, one statement per kind of outcome,
//! each acknowledged once written.
//!
//! A write that fails because the database is unreachable is retried with backoff, never
//! dropped; an outcome refused for good is isolated from its batch and answered with its
//! error ([`hopper::outcomes`]). An outcome whose job row another transaction holds is kept
//! aside ([`Deferred`]) with its request, its lease renewed meanwhile
//! ([`hopper::outcomes::renew_held`]), written again once free and only then
//! acknowledged, while the rest go on; the loop hears of every lease written
//! ([`Event::Written`]), so a second outcome for a held one is still refused meanwhile.

use std::sync::Arc;
use std::time::Duration;

use hopper::outcomes::Deferred;
use hopper_core::Lease;
use hopper_core::backend::{Backend, Finish, FinishResult};
use hopper_protocol::{FinishResult as WireResult, Reply};
use tokio::sync::mpsc;

use crate::in_flight::Permit;
use crate::server::{Event, PeerId};

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
    /// The place in flight of its peer's that the item holds until it is answered, when
    /// some of its outcomes are for leases no peer held: nothing else bounds how many of
    /// those a peer has waiting (`Core::place_for_unheld`).
    pub place: Option<Permit>,
}

/// Most outcomes written by one statement.
const FINISH_BATCH: usize = 1000;

/// How long a stopping server still tries to write outcomes whose rows are held, as long
/// as a stopping runtime does.
const HELD_AT_STOP: Duration = Duration::from_secs(30);

/// Writes outcomes in batches and acknowledges each (see the module docs). `writers`
/// batches are written at once, so one slow round trip does not hold up the rest. The
/// channel is shared so that a run restarted by its supervisor takes it over; a run ends
/// when the channel is closed and drained. Held outcomes' leases are renewed by `lease`.
pub(crate) async fn finish(
    backend: Arc<dyn Backend>,
    items: Arc<tokio::sync::Mutex<mpsc::Receiver<FinishItem>>>,
    out: mpsc::Sender<(PeerId, Reply)>,
    events: mpsc::Sender<Event>,
    writers: usize,
    lease: Duration,
) {
    let mut tasks = Vec::new();
    for _ in 0..writers.max(1) {
        let writer = Writer {
            backend: backend.clone(),
            out: out.clone(),
            events: events.clone(),
            held: Deferred::default(),
            lease,
        };
        tasks.push(tokio::spawn(writer.run(items.clone())));
    }
    for task in tasks {
        let _ = task.await;
    }
}

/// One of the writers.
struct Writer {
    backend: Arc<dyn Backend>,
    out: mpsc::Sender<(PeerId, Reply)>,
    events: mpsc::Sender<Event>,
    /// Outcomes whose job rows were held, with their requests.
    held: Deferred<FinishItem>,
    /// What the leases of held outcomes are renewed by.
    lease: Duration,
}

impl Writer {
    async fn run(mut self, items: Arc<tokio::sync::Mutex<mpsc::Receiver<FinishItem>>>) {
        loop {
            let batch = tokio::select! {
                batch = next_batch(&items) => match batch {
                    Some(batch) => batch,
                    None => break,
                },
                () = self.held.due() => self.held.take(),
            };
            self.write(batch).await;
        }
        // The channel is closed: the server is stopping.
        let stop_at = tokio::time::Instant::now() + HELD_AT_STOP;
        while !self.held.is_empty() {
            if tokio::time::timeout_at(stop_at, self.held.due())
                .await
                .is_err()
            {
                tracing::error!(
                    "outcomes whose job rows stay held could not be written before the server stopped; their leases will expire and the jobs run again"
                );
                return;
            }
            let batch = self.held.take();
            self.write(batch).await;
        }
    }

    /// Writes `batch`, answers its requests, keeps its held outcomes for later, and tells
    /// the loop which leases were written.
    async fn write(&mut self, batch: Vec<FinishItem>) {
        let finishes: Vec<Finish> = batch
            .iter()
            .flat_map(|i| i.finishes.iter().cloned())
            .collect();
        // Transient failures are retried until they pass; an outcome refused for good is
        // isolated from the batch, answered with its error and counted (hopper::outcomes).
        let mut results = hopper::outcomes::write_isolating(&*self.backend, &finishes)
            .await
            .into_iter();
        let mut written: Vec<Lease> = Vec::with_capacity(finishes.len());
        let mut held = Vec::new();
        for item in batch {
            let answers: Vec<_> = results.by_ref().take(item.finishes.len()).collect();
            let (reply, rest) = answer(item, answers, &mut written);
            if let Some(rest) = rest {
                held.push(rest);
            }
            if let Some(reply) = reply {
                let _ = self.out.send(reply).await;
            }
        }
        let leases = held
            .iter()
            .flat_map(|i| i.finishes.iter().map(|f| f.lease))
            .collect();
        self.held.defer(held);
        let _ = self.events.send(Event::Written(written)).await;
        hopper::outcomes::renew_held(&*self.backend, leases, self.lease).await;
    }
}

/// Takes the next batch from `items`: the first item waited for, then whatever else is
/// waiting, up to [`FINISH_BATCH`] outcomes. `None` once the channel is closed and empty.
async fn next_batch(
    items: &tokio::sync::Mutex<mpsc::Receiver<FinishItem>>,
) -> Option<Vec<FinishItem>> {
    let mut items = items.lock().await;
    let first = items.recv().await?;
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
    Some(batch)
}

/// The reply to `item`, whose outcomes were answered `answers` (in order), and the part of
/// it to write again: its held outcomes, with the request, whose reply then carries the
/// results known now. Appends the leases written to `written`.
fn answer(
    item: FinishItem,
    answers: Vec<hopper::Result<FinishResult>>,
    written: &mut Vec<Lease>,
) -> (Option<(PeerId, Reply)>, Option<FinishItem>) {
    let mut rest = Vec::new();
    let mut results = Vec::with_capacity(answers.len());
    for (finish, a) in item.finishes.into_iter().zip(answers) {
        match a {
            Ok(FinishResult::Held) => rest.push(finish),
            _ => written.push(finish.lease),
        }
        results.push(a);
    }
    let rest = (!rest.is_empty()).then_some(rest);
    // What is written again keeps the place in flight; the answered item gives it back.
    let place = item.place;
    let again = |finishes, reply_to| FinishItem {
        finishes,
        reply_to,
        place,
    };
    match item.reply_to {
        ReplyTo::Nobody => (None, rest.map(|f| again(f, ReplyTo::Nobody))),
        ReplyTo::Ack(peer, req) => match (rest, results.into_iter().next()) {
            (Some(f), _) => (None, Some(again(f, ReplyTo::Ack(peer, req)))),
            (None, Some(Err(e))) => (Some((peer, Reply::failure(Some(req), &e))), None),
            (None, Some(Ok(r))) => (Some((peer, ack(req, r))), None),
            (None, None) => (Some((peer, ack(req, FinishResult::LeaseLost))), None),
        },
        ReplyTo::Acks(peer, req, preset) => {
            // Each open slot takes the next outcome's result; a held one stays open.
            let mut results = results.into_iter();
            let filled: Vec<Option<WireResult>> = preset
                .into_iter()
                .map(|slot| match slot {
                    Some(known) => Some(known),
                    None => match results.next() {
                        Some(Ok(FinishResult::Held)) => None,
                        Some(r) => Some(wire(&r)),
                        None => Some(WireResult::LeaseLost),
                    },
                })
                .collect();
            if let Some(f) = rest {
                return (None, Some(again(f, ReplyTo::Acks(peer, req, filled))));
            }
            let results = filled
                .into_iter()
                .map(|r| r.unwrap_or(WireResult::LeaseLost))
                .collect();
            (Some((peer, Reply::Acks { req, results })), None)
        }
    }
}

/// An `ack` saying `result`.
fn ack(req: u64, result: FinishResult) -> Reply {
    Reply::Ack {
        req,
        result: wire(&Ok(result)),
    }
}

/// How an outcome's result goes on the wire: recorded, or lost (refused ones included: in
/// an `acks` each item can only say one or the other).
fn wire(result: &hopper::Result<FinishResult>) -> WireResult {
    match result {
        Ok(FinishResult::Recorded(_)) => WireResult::Recorded,
        _ => WireResult::LeaseLost,
    }
}
