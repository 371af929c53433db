//! Writing outcomes so that none can wedge the writer: shared by the runtime's completer
//! and `hopper serve`'s outcome writer.
//!
//! [`write_isolating`] checks each outcome's durations against
//! [`hopper_core::limits::MAX_DURATION`] before writing, retries the batch while the
//! database fails for a transient reason (it is unreachable), and when the batch is refused
//! for a permanent one (a data exception), splits it in halves until the entry at fault is
//! alone: that entry gets the error, logged at error level and counted in
//! [`crate::metrics::OUTCOMES_REFUSED_TOTAL`], every other is written. A refused outcome
//! leaves its job leased; the lease expires and the job runs again (at-least-once).
//!
//! An outcome whose job row another transaction holds comes back
//! [`FinishResult::Held`] (nothing written, the lease standing): the writer keeps it in a
//! [`Deferred`] and goes on with the others, writing it again when [`Deferred::due`].
//! Meanwhile its lease is renewed at each try ([`renew_held`]): a hold that outlasts the
//! lease must not let the rescuer take back a job whose outcome is only waiting.
//!
//! The statements of one batch commit one by one (one per kind of outcome), so the other
//! kinds of a refused batch may have landed already; written again alone they read as
//! [`FinishResult::LeaseLost`], though their outcome is recorded.

use std::time::Duration;

use hopper_core::backend::JobExtendManyParams;
use hopper_core::{Backend, Backoff, Error, Finish, FinishResult, Lease, Outcome, Result, limits};

/// The delays between the writes of a batch that failed for a transient reason.
const WRITE_RETRY: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));

/// The delays before outcomes answered [`FinishResult::Held`] are written again: 100 ms,
/// doubling to 5 s while any stays held.
const HELD_RETRY: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));

/// Entries to write again later: those a write answered [`FinishResult::Held`] (or what
/// carries them: a pending outcome, a request waiting for its acknowledgement). A writer
/// keeps them here, goes on with the others, and takes them back when [`Deferred::due`].
#[derive(Debug)]
pub struct Deferred<T> {
    items: Vec<T>,
    at: Option<tokio::time::Instant>,
    backoff: Backoff,
}

impl<T> Default for Deferred<T> {
    fn default() -> Self {
        Deferred {
            items: Vec::new(),
            at: None,
            backoff: HELD_RETRY,
        }
    }
}

impl<T> Deferred<T> {
    /// Keeps `held`, the entries of one write that were answered held, for a later try. A
    /// write with none held, while none is kept, starts the delays again from the first.
    pub fn defer(&mut self, held: Vec<T>) {
        if held.is_empty() {
            if self.items.is_empty() {
                self.backoff.reset();
            }
            return;
        }
        if self.at.is_none() {
            let delay = self.backoff.next_delay();
            tracing::warn!(outcomes = held.len() + self.items.len(), retry_in = ?delay, "outcomes not written yet: another transaction holds their jobs' rows");
            self.at = Some(tokio::time::Instant::now() + delay);
        }
        self.items.extend(held);
    }

    /// Resolves when the kept entries are due for another try; never while none is kept.
    pub async fn due(&self) {
        match self.at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }

    /// Takes the kept entries, to write them again.
    pub fn take(&mut self) -> Vec<T> {
        self.at = None;
        std::mem::take(&mut self.items)
    }

    /// True when no entry is kept.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// Renews by `by` the leases of outcomes kept aside as held, after a write answered them
/// held again, and counts them ([`crate::metrics::OUTCOMES_HELD_TOTAL`]). Their rows are
/// still held, so PostgreSQL notes the renewal beside the row (`held_leases`) and its
/// rescuer leaves those jobs alone until the note expires; a row freed meanwhile is renewed
/// in place. A failure is logged and left to the next try (the outcome is written once the
/// row is free either way); leases found lost need nothing: their outcomes will be answered
/// lost.
pub async fn renew_held(backend: &dyn Backend, leases: Vec<Lease>, by: Duration) {
    if leases.is_empty() {
        return;
    }
    crate::metrics::outcomes_held(leases.len());
    let params = JobExtendManyParams { leases, by };
    if let Err(e) = crate::spans::extend_leases(backend, &params).await {
        tracing::warn!(error = %e.with_causes(), jobs = params.leases.len(), "renewing the leases of held outcomes failed; trying again with them");
    }
}

/// Writes `finishes`, one result per entry in order. Transient failures are retried with
/// backoff (50 ms doubling to 5 s) until they pass; permanent ones are isolated to their
/// entry.
pub async fn write_isolating(
    backend: &dyn Backend,
    finishes: &[Finish],
) -> Vec<Result<FinishResult>> {
    let mut results: Vec<Option<Result<FinishResult>>> = Vec::with_capacity(finishes.len());
    let mut valid = Vec::with_capacity(finishes.len());
    for (i, finish) in finishes.iter().enumerate() {
        match check(&finish.outcome) {
            Ok(()) => {
                valid.push(i);
                results.push(None);
            }
            Err(e) => results.push(Some(Err(e))),
        }
    }
    let mut groups = vec![valid];
    let mut backoff = WRITE_RETRY;
    while let Some(group) = groups.pop() {
        if group.is_empty() {
            continue;
        }
        let batch: Vec<Finish> = group.iter().map(|&i| finishes[i].clone()).collect();
        let span = crate::spans::finish_batch(batch.len());
        let written = crate::spans::seam(span, backend.job_finish_many(&batch), |_| None);
        match written.await {
            Ok(written) => {
                backoff.reset();
                for (&i, result) in group.iter().zip(written) {
                    results[i] = Some(Ok(result));
                }
            }
            Err(e) if e.is_transient() => {
                let delay = backoff.next_delay();
                tracing::warn!(error = %e.with_causes(), jobs = group.len(), retry_in = ?delay, "writing outcomes failed; retrying");
                tokio::time::sleep(delay).await;
                groups.push(group);
            }
            Err(e) if group.len() == 1 => results[group[0]] = Some(Err(e)),
            Err(e) => {
                tracing::warn!(error = %e.with_causes(), jobs = group.len(), "a batch of outcomes was refused; writing it in halves to find the one at fault");
                let (left, right) = group.split_at(group.len() / 2);
                groups.push(right.to_vec());
                groups.push(left.to_vec());
            }
        }
    }
    finishes
        .iter()
        .zip(results)
        .map(|(finish, result)| {
            let result = result.unwrap_or_else(|| Err(Error::Shutdown));
            if let Err(e) = &result {
                crate::metrics::outcome_refused();
                tracing::error!(job_id = %finish.lease.job_id, attempt = finish.lease.attempt, error = %e.with_causes(), "an outcome was refused and not written; the job runs again when its lease expires");
            }
            result
        })
        .collect()
}

/// Refuses an outcome whose delay is over the bound of every duration.
fn check(outcome: &Outcome) -> Result<()> {
    match outcome {
        Outcome::Retry { retry_in, .. } => limits::check_duration("retry_in", *retry_in).map(drop),
        Outcome::Snoozed { retry_in } => limits::check_duration("snooze", *retry_in).map(drop),
        Outcome::Completed { .. } | Outcome::Failed { .. } | Outcome::Released => Ok(()),
    }
}
