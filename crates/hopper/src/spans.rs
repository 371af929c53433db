//! The `tracing` spans hopper emits, all made here, so their names and fields are written
//! down once and stay stable (docs/observability.md lists them for users).
//!
//! | span | level | fields |
//! |---|---|---|
//! | `hopper.enqueue` | INFO | `queue`, `kind` (of the first job), `jobs`, `outcome`, `duration_ms`, `error` |
//! | `hopper.periodic` | INFO | `periodic` (the entry's name), `queue`, `kind`, `ticks`, `jobs`, `outcome`, `duration_ms`, `error` |
//! | `hopper.job` | INFO | `queue`, `kind`, `job_id`, `attempt`, `outcome`, `duration_ms`, `error` |
//! | `hopper.claim` | DEBUG | `queue`, `limit`, `jobs`, `outcome`, `duration_ms`, `error` |
//! | `hopper.finish_batch` | DEBUG | `jobs`, `outcome`, `duration_ms`, `error` |
//! | `hopper.extend` | DEBUG | `jobs`, `lost`, `outcome`, `duration_ms`, `error` |
//! | `hopper.promote` | DEBUG | `jobs`, `outcome`, `duration_ms`, `error` |
//! | `hopper.rescue` | DEBUG | `jobs`, `outcome`, `duration_ms`, `error` |
//! | `hopper.release_dead` | DEBUG | `jobs`, `outcome`, `duration_ms`, `error` |
//! | `hopper.prune` | DEBUG | `jobs`, `outcome`, `duration_ms`, `error` |
//! | `hopper.vacuum` | DEBUG | `outcome`, `duration_ms`, `error` |
//!
//! `outcome` is `ok` or `error` for a storage call; for a job attempt it is what the attempt
//! ended as: `completed`, `retry`, `failed`, `snoozed`, `released` (handed back at
//! shutdown) or `dropped` (cancelled or lease lost: nothing reported). `duration_ms` is the
//! call's (the attempt's) wall time in milliseconds (a float: microseconds as the fraction); `error` the error's text, only when there is one. The
//! spans carry the OpenTelemetry hints `otel.kind` (`producer` for an enqueue, `consumer`
//! for a job) and `otel.status_code` (`ERROR` on a failure), which the `otel` feature's
//! bridge turns into span kind and status; a plain `tracing` subscriber shows them as fields.
//! (The OpenTelemetry span of an attempt is made by `hopper::otel::OtelMiddleware` with
//! the same name, fields, kind and status; the bridge leaves `hopper.job` out.)
//!
//! All spans have the target `hopper::spans`, so one directive picks them:
//! `hopper::spans=debug` for all of them, `hopper::spans=info` for enqueues and jobs only.
//! A subscriber that disables them (the `hopper` binary's default, `warn`) pays one check
//! of a cached interest per span, not the span.

use std::future::Future;
use std::time::{Duration, Instant};

use hopper_core::backend::JobExtendManyParams;
use hopper_core::{Backend, ClaimedJob, Lease, NewJob, Outcome, Result};
use tracing::field::Empty;
use tracing::{Instrument, Span};

/// The target of every span of this module (its path).
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(crate) const TARGET: &str = module_path!();

/// The span of an enqueue of `jobs` jobs (one call of the client, single or bulk).
pub(crate) fn enqueue(queue: &str, kind: &str, jobs: usize) -> Span {
    tracing::info_span!(
        "hopper.enqueue",
        queue,
        kind,
        jobs = count(jobs),
        outcome = Empty,
        duration_ms = Empty,
        error = Empty,
        otel.kind = "producer",
        otel.status_code = Empty,
    )
}

/// The span of an enqueue of `jobs` (the queue and kind of the first job).
pub(crate) fn enqueue_many(jobs: &[NewJob]) -> Span {
    match jobs.first() {
        Some(first) => enqueue(&first.queue, &first.kind, jobs.len()),
        None => enqueue("", "", 0),
    }
}

/// The span of one advance of the periodic entry `name`: its `ticks` jobs (one, or the
/// missed ones of a catching-up entry) are enqueued inside it, so their trace context is
/// its own. `jobs` is how many this node wrote (0 when another node enqueued the tick).
pub(crate) fn periodic(name: &str, job: &NewJob, ticks: usize) -> Span {
    tracing::info_span!(
        "hopper.periodic",
        periodic = name,
        queue = %job.queue,
        kind = %job.kind,
        ticks = count(ticks),
        jobs = Empty,
        outcome = Empty,
        duration_ms = Empty,
        error = Empty,
        otel.kind = "producer",
        otel.status_code = Empty,
    )
}

/// The span of one attempt of `job`.
pub(crate) fn job(job: &ClaimedJob) -> Span {
    tracing::info_span!(
        "hopper.job",
        queue = %job.queue,
        kind = %job.kind,
        job_id = %job.lease.job_id,
        attempt = job.lease.attempt,
        outcome = Empty,
        duration_ms = Empty,
        error = Empty,
        otel.kind = "consumer",
        otel.status_code = Empty,
    )
}

/// Records how an attempt ended on its span (`None`: dropped, nothing to report).
pub(crate) fn job_end(span: &Span, outcome: Option<&Outcome>, ran: Duration) {
    if span.is_disabled() {
        return;
    }
    span.record("duration_ms", millis(ran));
    let (label, error) = outcome_label(outcome);
    span.record("outcome", label);
    if let Some(error) = error {
        span.record("error", error);
        span.record("otel.status_code", "ERROR");
    }
}

/// An attempt's `outcome` field (`None`: dropped), and its `error` when it failed.
pub(crate) fn outcome_label(outcome: Option<&Outcome>) -> (&'static str, Option<&str>) {
    match outcome {
        Some(Outcome::Completed { .. }) => ("completed", None),
        Some(Outcome::Retry { error, .. }) => ("retry", Some(error)),
        Some(Outcome::Failed { error, .. }) => ("failed", Some(error)),
        Some(Outcome::Snoozed { .. }) => ("snoozed", None),
        Some(Outcome::Released) => ("released", None),
        None => ("dropped", None),
    }
}

/// The span of a claim of up to `limit` jobs from `queue`.
pub(crate) fn claim(queue: &str, limit: u32) -> Span {
    tracing::debug_span!(
        "hopper.claim",
        queue,
        limit = count(limit),
        jobs = Empty,
        outcome = Empty,
        duration_ms = Empty,
        error = Empty
    )
}

/// The span of one statement writing `jobs` outcomes.
pub(crate) fn finish_batch(jobs: usize) -> Span {
    tracing::debug_span!(
        "hopper.finish_batch",
        jobs = count(jobs),
        outcome = Empty,
        duration_ms = Empty,
        error = Empty
    )
}

/// The span of an extension of `jobs` leases.
fn extend(jobs: usize) -> Span {
    tracing::debug_span!(
        "hopper.extend",
        jobs = count(jobs),
        lost = Empty,
        outcome = Empty,
        duration_ms = Empty,
        error = Empty
    )
}

/// Extends `params.leases` inside an `hopper.extend` span; answers the leases lost.
pub(crate) async fn extend_leases(
    backend: &dyn Backend,
    params: &JobExtendManyParams,
) -> Result<Vec<Lease>> {
    let span = extend(params.leases.len());
    seam(span.clone(), backend.job_extend_many(params), |lost| {
        span.record("lost", count(lost.len()));
        None
    })
    .await
}

/// The span of one promotion of due scheduled jobs.
pub(crate) fn promote() -> Span {
    tracing::debug_span!(
        "hopper.promote",
        jobs = Empty,
        outcome = Empty,
        duration_ms = Empty,
        error = Empty
    )
}

/// The span of one rescue of jobs whose lease expired.
pub(crate) fn rescue() -> Span {
    tracing::debug_span!(
        "hopper.rescue",
        jobs = Empty,
        outcome = Empty,
        duration_ms = Empty,
        error = Empty
    )
}

/// The span of one release of the jobs of dead nodes.
pub(crate) fn release_dead() -> Span {
    tracing::debug_span!(
        "hopper.release_dead",
        jobs = Empty,
        outcome = Empty,
        duration_ms = Empty,
        error = Empty
    )
}

/// The span of one pruning statement.
pub(crate) fn prune() -> Span {
    tracing::debug_span!(
        "hopper.prune",
        jobs = Empty,
        outcome = Empty,
        duration_ms = Empty,
        error = Empty
    )
}

/// The span of one vacuum check (and vacuum, if due).
pub(crate) fn vacuum() -> Span {
    tracing::debug_span!(
        "hopper.vacuum",
        outcome = Empty,
        duration_ms = Empty,
        error = Empty
    )
}

/// Runs the storage call `call` inside `span` and records on it its duration, `outcome`,
/// `error` and, through `jobs_of`, the number of jobs it touched (`jobs`). A disabled span
/// costs nothing more than the call.
pub(crate) async fn seam<T, F>(
    span: Span,
    call: F,
    jobs_of: impl FnOnce(&T) -> Option<u64>,
) -> Result<T>
where
    F: Future<Output = Result<T>>,
{
    if span.is_disabled() {
        return call.await;
    }
    let started = Instant::now();
    let result = call.instrument(span.clone()).await;
    span.record("duration_ms", millis(started.elapsed()));
    match &result {
        Ok(value) => {
            span.record("outcome", "ok");
            if let Some(n) = jobs_of(value) {
                span.record("jobs", count(n));
            }
        }
        Err(e) => {
            span.record("outcome", "error");
            span.record("error", tracing::field::display(e));
        }
    }
    result
}

/// A count for [`seam`] of a call that returns one.
pub(crate) fn counted(n: &u64) -> Option<u64> {
    Some(*n)
}

/// For [`seam`] on a call whose result has no count worth a field.
pub(crate) fn uncounted<T>(_: &T) -> Option<u64> {
    None
}

/// Milliseconds with microseconds as the fraction: most storage calls take less than one.
pub(crate) fn millis(d: Duration) -> f64 {
    (d.as_micros() as f64) / 1000.0
}

/// A count as a signed field: OpenTelemetry attributes have no unsigned integers (the
/// bridge would record an unsigned one as text).
fn count(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}
