//! Between the wire's types (`hopper_protocol`) and the storage seam's (`hopper_core`).

use std::time::Duration;

use hopper_core::limits::duration_ms;
use hopper_core::{ClaimedJob, Error, JobRecord, NewJob, Priority, Result};
use hopper_protocol::{
    AttemptInfo, ErrorCode, JobInfo, JobSpec, Order, OutcomeItem, PriorityValue,
};

/// Checks the durations of an outcome against the one bound of every way in
/// ([`hopper_core::limits::MAX_DURATION`]), so that what is queued for writing can be written: past it a
/// job's next run would leave the range of instants the database holds.
pub(crate) fn check_outcome(item: &OutcomeItem) -> Result<()> {
    match item {
        OutcomeItem::Failed {
            retry_in_ms: Some(ms),
            ..
        } => duration_ms("retry_in_ms", *ms).map(drop),
        OutcomeItem::Snoozed { delay_ms, .. } => duration_ms("delay_ms", *delay_ms).map(drop),
        _ => Ok(()),
    }
}

/// Builds the job to insert from a submitted spec, and validates it.
pub(crate) fn new_job(spec: JobSpec) -> Result<NewJob> {
    let mut job = NewJob::new(spec.kind, spec.args);
    if let Some(id) = spec.id {
        // Ids are UUIDv7 so that they sort by creation: listing newest first, paging with
        // `before` and the FIFO order of a batch rely on it.
        if id.get_version_num() != 7 {
            return Err(Error::InvalidInput(format!(
                "id {id} is a UUID of version {}; job ids must be UUIDv7",
                id.get_version_num()
            )));
        }
        job.id = id;
    }
    if let Some(queue) = spec.queue {
        job.queue = queue;
    }
    if let Some(priority) = spec.priority {
        job.priority = match priority {
            PriorityValue::Number(n) => Priority(n),
            PriorityValue::Name(name) => name.parse()?,
        };
    }
    match (spec.run_at, spec.delay_ms) {
        (Some(_), Some(_)) => {
            return Err(Error::InvalidInput(
                "give run_at or delay_ms, not both".to_owned(),
            ));
        }
        (Some(at), None) => job.run_at = Some(at),
        (None, Some(ms)) => job = job.with_delay(duration_ms("delay_ms", ms)?),
        (None, None) => {}
    }
    if let Some(max) = spec.max_attempts {
        job.max_attempts = max;
    }
    if let Some(ms) = spec.timeout_ms {
        job.timeout = Duration::from_millis(ms);
    }
    job.validate()?;
    Ok(job)
}

/// A stored job as the wire shows it.
pub(crate) fn job_info(job: JobRecord) -> JobInfo {
    JobInfo {
        id: job.id,
        queue: job.queue,
        kind: job.kind,
        args: job.args,
        state: job.state.as_str().to_owned(),
        priority: job.priority.0,
        run_at: job.run_at,
        attempt: job.attempt,
        attempts_used: job.attempt - job.uncounted,
        max_attempts: job.max_attempts,
        timeout_ms: job.timeout_ms,
        created_at: job.created_at,
        attempted_at: job.attempted_at,
        finished_at: job.finished_at,
        duration_ms: job.duration_ms,
        errors: job
            .errors
            .into_iter()
            .map(|e| AttemptInfo {
                attempt: e.attempt,
                at: e.at,
                error: e.error,
                duration_ms: e.duration_ms,
            })
            .collect(),
    }
}

/// A claimed job as an order.
pub(crate) fn order(job: &ClaimedJob) -> Order {
    Order {
        id: job.lease.job_id,
        attempt: job.lease.attempt,
        queue: job.queue.clone(),
        kind: job.kind.clone(),
        args: job.args.clone(),
        priority: job.priority.0,
        counted_attempt: job.counted_attempt,
        max_attempts: job.max_attempts,
        timeout_ms: u64::try_from(job.timeout.as_millis()).unwrap_or(u64::MAX),
        created_at: job.created_at,
        run_at: job.run_at,
    }
}

/// The error code and message for a failed backend call.
pub(crate) fn error_code(e: &Error) -> ErrorCode {
    match e {
        Error::InvalidInput(_) | Error::Args(_) => ErrorCode::Invalid,
        Error::NotFound(_) => ErrorCode::NotFound,
        Error::Conflict(_) => ErrorCode::Conflict,
        Error::LeaseLost(_) => ErrorCode::Conflict,
        _ => ErrorCode::Internal,
    }
}

/// An error with the chain of its causes, for logs: a database error says what the
/// database said ("database: db error: ERROR: … "), not only "db error".
pub(crate) fn detail(e: &Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

/// Exponential backoff with jitter for failed attempts that name no delay: about
/// 2^attempt seconds, capped at one hour, spread ±10% (the same rule as the Rust runtime).
pub(crate) fn default_backoff(counted_attempt: i32) -> Duration {
    let exp = counted_attempt.clamp(1, 12) as u32;
    let base = Duration::from_secs(2u64.pow(exp)).min(Duration::from_secs(3600));
    base.mul_f64(rand::random_range(0.9..1.1))
}
