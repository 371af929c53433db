//! Running one handler to its end: the steps that the runtime's executor and
//! `testing::run_job` share, so that a test sees exactly what the runtime would do.
//!
//! 1. [`hold_for_timeout`]: a worker whose own timeout is longer than the lease the claim
//!    granted extends the lease first, or a rescuer could take the job back mid-run.
//! 2. [`drive`]: the handler runs under its deadline (which `JobContext::extend` moves),
//!    its panics caught, until it returns, times out or is stopped through its token.
//! 3. [`settle`]: what the end stands for, given why the run was stopped, if it was.
//! 4. [`outcome`]: the outcome to record for a handler's result.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;
use hopper_core::backend::JobExtendManyParams;
use hopper_core::{Backend, ClaimedJob, Outcome, Result};
use tokio::time::Instant;

use crate::context::{JobContext, RunState, StopReason};
use crate::middleware::Chain;
use crate::registry::ErasedWorker;
use crate::worker::JobError;

/// How a handler's run ended, before the reason it may have been stopped for is weighed.
#[derive(Debug)]
pub(crate) enum End {
    /// The handler returned (a panic or a timeout counts as a returned retryable error).
    Returned(std::result::Result<(), JobError>),
    /// The run's token was cancelled and the handler did not return first.
    Stopped,
}

/// What to do with a run that ended.
#[derive(Debug)]
pub(crate) enum Settled {
    /// Report the handler's result.
    Report(std::result::Result<(), JobError>),
    /// Hand the job back unstarted (a shutdown stopped it before it succeeded).
    Release,
    /// Report nothing: the job was cancelled or its lease lost, it is no longer ours.
    Drop,
}

/// Extends the lease of `job` when the worker's `timeout` needs more than the claim
/// granted (both capped by `lease_cap`, the lease a runtime asks for). False when the
/// lease was already lost.
pub(crate) async fn hold_for_timeout(
    backend: &dyn Backend,
    job: &ClaimedJob,
    timeout: Duration,
    lease_cap: Duration,
) -> Result<bool> {
    let needed = timeout.min(lease_cap);
    if needed <= job.timeout.min(lease_cap) {
        return Ok(true);
    }
    let params = JobExtendManyParams {
        leases: vec![job.lease],
        by: needed,
    };
    Ok(crate::spans::extend_leases(backend, &params)
        .await?
        .is_empty())
}

/// Runs `worker` on `args`, through the middleware of `chain`, until it returns, its deadline passes (the token is then
/// cancelled and the run is a retryable failure), or its token is cancelled.
pub(crate) async fn drive(
    worker: &dyn ErasedWorker,
    chain: &Chain,
    ctx: &JobContext,
    args: &serde_json::Value,
    run: &RunState,
    started: Instant,
) -> End {
    let handler = AssertUnwindSafe(chain.execute(worker, ctx, args)).catch_unwind();
    tokio::pin!(handler);
    loop {
        let deadline = *run.deadline.lock().await;
        tokio::select! {
            // The handler first: one that watches its token reacts in the poll that sees it
            // fire, and its reaction runs; one that does not is dropped by the next branch.
            biased;
            returned = &mut handler => {
                return End::Returned(returned.unwrap_or_else(|panic| {
                    Err(JobError::retry(format!("panicked: {}", panic_message(&*panic))))
                }));
            }
            _ = run.token.cancelled() => return End::Stopped,
            _ = tokio::time::sleep_until(deadline) => {
                if *run.deadline.lock().await <= Instant::now() {
                    run.token.cancel();
                    return End::Returned(Err(JobError::retry(format!(
                        "timed out after {:?}",
                        deadline - started
                    ))));
                }
            }
        }
    }
}

/// A stopped run ends by its reason, whatever a handler that reacted to its token
/// returned: a shutdown hands the job back without penalty (unless the work got done), and
/// a cancelled or lost job is no longer ours to report on.
pub(crate) fn settle(reason: StopReason, end: End) -> Settled {
    match (reason, end) {
        (StopReason::None, End::Returned(result)) => Settled::Report(result),
        (StopReason::Shutdown, End::Returned(Ok(()))) => Settled::Report(Ok(())),
        (StopReason::Shutdown, _) => Settled::Release,
        _ => Settled::Drop,
    }
}

/// The outcome to record for a settled run, if any.
pub(crate) fn settled_outcome(
    settled: Settled,
    worker: &dyn ErasedWorker,
    attempt: i32,
    duration_ms: i64,
) -> Option<Outcome> {
    match settled {
        Settled::Report(result) => Some(outcome(result, worker, attempt, duration_ms)),
        Settled::Release => Some(Outcome::Released),
        Settled::Drop => None,
    }
}

/// The outcome a handler's result stands for: a retry without its own delay takes the
/// worker's backoff for `attempt` (the default backoff, the panic appended to the error,
/// when the worker's panics). A retry or snooze delay past
/// [`hopper_core::limits::MAX_DURATION`] (a backoff that grows without bound) is held to
/// it: refused, the outcome would be lost and the job run again only when its lease
/// expired, as if its worker had vanished.
pub(crate) fn outcome(
    result: std::result::Result<(), JobError>,
    worker: &dyn ErasedWorker,
    attempt: i32,
    duration_ms: i64,
) -> Outcome {
    match result {
        Ok(()) => Outcome::Completed { duration_ms },
        Err(JobError::Retry {
            mut message,
            retry_in,
        }) => {
            let retry_in = match retry_in {
                Some(delay) => delay,
                None => backoff(worker, attempt, &mut message),
            };
            Outcome::Retry {
                error: message,
                retry_in: bounded("retry", retry_in),
                duration_ms,
            }
        }
        Err(JobError::Permanent(message)) => Outcome::Failed {
            error: message,
            duration_ms,
        },
        Err(JobError::Snooze(retry_in)) => Outcome::Snoozed {
            retry_in: bounded("snooze", retry_in),
        },
    }
}

/// The worker's backoff after failed attempt `attempt`; if it panics, the default backoff,
/// the panic said at the end of `message` (the attempt's recorded error).
fn backoff(worker: &dyn ErasedWorker, attempt: i32, message: &mut String) -> Duration {
    match std::panic::catch_unwind(AssertUnwindSafe(|| worker.backoff(attempt))) {
        Ok(delay) => delay,
        Err(panic) => {
            let panic = panic_message(&*panic);
            tracing::error!(%panic, attempt, "the worker's backoff panicked; the default backoff is used");
            message.push_str(&format!(
                " (the worker's backoff panicked: {panic}; retried after the default backoff)"
            ));
            crate::worker::default_backoff(attempt)
        }
    }
}

/// `delay`, held to [`hopper_core::limits::MAX_DURATION`] (said at warn level when it
/// was past it).
fn bounded(what: &str, delay: Duration) -> Duration {
    let bound = hopper_core::limits::MAX_DURATION;
    if delay > bound {
        tracing::warn!(
            ?delay,
            ?bound,
            "a {what} delay past the bound of every delay is held to it"
        );
    }
    delay.min(bound)
}

/// The text of a handler's panic payload.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}

/// Milliseconds of `ran`, saturating.
pub(crate) fn millis(ran: Duration) -> i64 {
    i64::try_from(ran.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(settled: Settled) -> &'static str {
        match settled {
            Settled::Report(Ok(())) => "ok",
            Settled::Report(Err(_)) => "error",
            Settled::Release => "release",
            Settled::Drop => "drop",
        }
    }

    fn failed() -> End {
        End::Returned(Err(JobError::retry("failed")))
    }

    #[test]
    fn a_run_nobody_stopped_reports_what_the_handler_returned() {
        assert_eq!(label(settle(StopReason::None, End::Returned(Ok(())))), "ok");
        assert_eq!(label(settle(StopReason::None, failed())), "error");
    }

    #[test]
    fn a_shutdown_keeps_done_work_and_hands_back_the_rest() {
        assert_eq!(
            label(settle(StopReason::Shutdown, End::Returned(Ok(())))),
            "ok"
        );
        assert_eq!(label(settle(StopReason::Shutdown, failed())), "release");
        assert_eq!(label(settle(StopReason::Shutdown, End::Stopped)), "release");
    }

    #[test]
    fn a_cancelled_or_lost_run_reports_nothing_even_if_it_succeeded() {
        for reason in [StopReason::Cancelled, StopReason::LeaseLost] {
            assert_eq!(label(settle(reason, End::Returned(Ok(())))), "drop");
            assert_eq!(label(settle(reason, End::Stopped)), "drop");
        }
    }
}
