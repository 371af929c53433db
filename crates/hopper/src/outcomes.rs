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
//! The statements of one batch commit one by one (one per kind of outcome), so the other
//! kinds of a refused batch may have landed already; written again alone they read as
//! [`FinishResult::LeaseLost`], though their outcome is recorded.

use std::time::Duration;

use hopper_core::{Backend, Backoff, Error, Finish, FinishResult, Outcome, Result, limits};

/// The delays between the writes of a batch that failed for a transient reason.
const WRITE_RETRY: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));

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
                tracing::warn!(error = %e, jobs = group.len(), retry_in = ?delay, "writing outcomes failed; retrying");
                tokio::time::sleep(delay).await;
                groups.push(group);
            }
            Err(e) if group.len() == 1 => results[group[0]] = Some(Err(e)),
            Err(e) => {
                tracing::warn!(error = %e, jobs = group.len(), "a batch of outcomes was refused; writing it in halves to find the one at fault");
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
                tracing::error!(job_id = %finish.lease.job_id, attempt = finish.lease.attempt, error = %e, "an outcome was refused and not written; the job runs again when its lease expires");
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
