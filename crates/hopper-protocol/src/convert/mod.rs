//! Between the wire's types and the storage seam's ([`hopper_core`]), in one place for
//! both ends: `hopper serve` turns requests into core types and core types into replies,
//! the remote transport of the `hopper` crate the other way round.
//!
//! | wire | core | direction |
//! | --- | --- | --- |
//! | [`Order`] | [`ClaimedJob`] | both |
//! | [`JobInfo`] | [`JobRecord`] | both (a record from the wire lacks the lease and the node) |
//! | [`JobSpec`] | [`NewJob`] | both (from the wire: checked as the server accepts it) |
//! | [`OutcomeItem`] | [`Finish`] / [`Outcome`] | both ([`OutcomeItem::into_outcome`]) |
//! | [`ErrorCode`] | [`Error`] | core to wire |
//!
//! And the admin payloads, each both ways (in `admin.rs`): [`crate::JobFilter`] and
//! `JobSearchParams` (from the wire: its limit checked, at most [`MAX_LIST_PAGE`]),
//! [`crate::QueueCounts`] and `QueueStats`, [`crate::QueueInfo`] and `QueueSettings`,
//! [`crate::QueueChange`] and `QueueUpdate`, [`crate::RateInfo`] and `RateLimit`,
//! [`crate::CronInfo`] and `CronEntry`, [`crate::NodeInfo`] and `NodeRecord`; and from the
//! wire only, `list_nodes`'s `before` and `limit` as `NodeListParams` ([`node_list_params`]:
//! the limit bounded as `list_jobs`'s).

mod admin;

pub use admin::{MAX_LIST_PAGE, clear_params, node_list_params, retry_failed_params};

use std::time::Duration;

use hopper_core::limits::duration_ms;
use hopper_core::{
    AttemptError, ClaimedJob, Error, Finish, JobRecord, Lease, NewJob, Outcome, Priority, Result,
};

use crate::batch::{Completed, Failed, OutcomeItem, Released, Snoozed};
use crate::jobs::{AttemptInfo, JobInfo, JobSpec, Order, PriorityValue};
use crate::messages::{ErrorCode, Reply};

/// [`duration_ms`], the duration left out.
fn duration_ms_bound(what: &str, ms: u64) -> Result<()> {
    duration_ms(what, ms).map(drop)
}

/// How long a run took, as a worker reports it: 0 or more milliseconds.
fn run_time(ms: i64) -> Result<()> {
    if ms < 0 {
        return Err(Error::InvalidInput(format!(
            "duration_ms must be 0 or more, got {ms}"
        )));
    }
    Ok(())
}

/// Whole milliseconds, saturating.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A claimed job as an order.
impl From<&ClaimedJob> for Order {
    fn from(job: &ClaimedJob) -> Self {
        Order {
            id: job.lease.job_id,
            attempt: job.lease.attempt,
            queue: job.queue.clone(),
            kind: job.kind.clone(),
            args: job.args.clone(),
            priority: job.priority.0,
            counted_attempt: job.counted_attempt,
            max_attempts: job.max_attempts,
            timeout_ms: millis(job.timeout),
            created_at: job.created_at,
            run_at: job.run_at,
            meta: job.meta.clone(),
        }
    }
}

/// An order as a runtime takes it.
impl From<Order> for ClaimedJob {
    fn from(job: Order) -> Self {
        ClaimedJob {
            lease: Lease {
                job_id: job.id,
                attempt: job.attempt,
            },
            queue: job.queue,
            kind: job.kind,
            args: job.args,
            priority: Priority(job.priority),
            counted_attempt: job.counted_attempt,
            max_attempts: job.max_attempts,
            timeout: Duration::from_millis(job.timeout_ms),
            created_at: job.created_at,
            run_at: job.run_at,
            meta: job.meta,
        }
    }
}

/// A stored job as the wire shows it.
impl From<JobRecord> for JobInfo {
    fn from(job: JobRecord) -> Self {
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
            meta: job.meta,
            args_bytes: job.args_bytes,
            meta_bytes: job.meta_bytes,
        }
    }
}

/// A job as the wire shows it, as a record. The wire does not carry the lease, the node,
/// the group or the unique key: they are `None`. Fails on a state this version does not
/// know.
impl TryFrom<JobInfo> for JobRecord {
    type Error = Error;

    fn try_from(job: JobInfo) -> Result<Self> {
        Ok(JobRecord {
            id: job.id,
            queue: job.queue,
            kind: job.kind,
            args: job.args,
            state: job.state.parse()?,
            priority: Priority(job.priority),
            run_at: job.run_at,
            attempt: job.attempt,
            uncounted: job.attempt - job.attempts_used,
            max_attempts: job.max_attempts,
            timeout_ms: job.timeout_ms,
            node_id: None,
            lease_expires_at: None,
            created_at: job.created_at,
            attempted_at: job.attempted_at,
            finished_at: job.finished_at,
            duration_ms: job.duration_ms,
            errors: job
                .errors
                .into_iter()
                .map(|e| AttemptError {
                    attempt: e.attempt,
                    at: e.at,
                    error: e.error,
                    node: None,
                    duration_ms: e.duration_ms,
                })
                .collect(),
            group: None,
            unique_key: None,
            meta: job.meta,
            args_bytes: job.args_bytes,
            meta_bytes: job.meta_bytes,
        })
    }
}

/// A job to insert as the wire carries it, every setting spelled out.
impl From<&NewJob> for JobSpec {
    fn from(job: &NewJob) -> Self {
        JobSpec {
            id: Some(job.id),
            kind: job.kind.clone(),
            args: job.args.clone(),
            queue: Some(job.queue.clone()),
            priority: Some(PriorityValue::Number(job.priority.0)),
            run_at: job.run_at,
            delay_ms: None,
            max_attempts: Some(job.max_attempts),
            timeout_ms: Some(millis(job.timeout)),
            meta: (!job.meta.is_empty()).then(|| job.meta_value()),
        }
    }
}

/// The job to insert from a submitted spec, checked as the server accepts it: the id a
/// UUIDv7, `run_at` or `delay_ms` but not both, durations within
/// [`hopper_core::limits::MAX_DURATION`], and [`NewJob::validate`].
impl TryFrom<JobSpec> for NewJob {
    type Error = Error;

    fn try_from(spec: JobSpec) -> Result<Self> {
        let mut job = NewJob::new(spec.kind, spec.args);
        if let Some(id) = spec.id {
            hopper_core::job::validate_chosen_id(id, chrono::Utc::now())?;
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
        if let Some(meta) = spec.meta {
            hopper_core::meta::validate_meta(&meta)?;
            if let serde_json::Value::Object(map) = meta {
                job.meta = map;
            }
        }
        job.validate()?;
        Ok(job)
    }
}

/// One outcome as the wire carries it.
impl From<&Finish> for OutcomeItem {
    fn from(finish: &Finish) -> Self {
        let (id, attempt) = (finish.lease.job_id, finish.lease.attempt);
        match &finish.outcome {
            Outcome::Completed { duration_ms } => OutcomeItem::Completed(Completed {
                id,
                attempt,
                duration_ms: *duration_ms,
            }),
            Outcome::Retry {
                error,
                retry_in,
                duration_ms,
            } => OutcomeItem::Failed(Failed {
                id,
                attempt,
                error: error.clone(),
                retryable: true,
                retry_in_ms: Some(millis(*retry_in)),
                duration_ms: *duration_ms,
            }),
            Outcome::Failed { error, duration_ms } => OutcomeItem::Failed(Failed {
                id,
                attempt,
                error: error.clone(),
                retryable: false,
                retry_in_ms: None,
                duration_ms: *duration_ms,
            }),
            Outcome::Snoozed { retry_in } => OutcomeItem::Snoozed(Snoozed {
                id,
                attempt,
                delay_ms: millis(*retry_in),
            }),
            Outcome::Released => OutcomeItem::Released(Released { id, attempt }),
        }
    }
}

impl OutcomeItem {
    /// Checks its durations: delays against the one bound of every way in
    /// ([`hopper_core::limits::MAX_DURATION`]), so that what is queued for writing can be
    /// written (past it a job's next run would leave the range of instants the database
    /// holds); the `duration_ms` of a run not below zero, so that no job's statistics
    /// average a negative run time.
    pub fn check(&self) -> Result<()> {
        match self {
            OutcomeItem::Completed(Completed { duration_ms, .. }) => run_time(*duration_ms),
            OutcomeItem::Failed(Failed {
                retry_in_ms,
                duration_ms,
                ..
            }) => {
                if let Some(ms) = retry_in_ms {
                    duration_ms_bound("retry_in_ms", *ms)?;
                }
                run_time(*duration_ms)
            }
            OutcomeItem::Snoozed(Snoozed { delay_ms, .. }) => {
                duration_ms_bound("delay_ms", *delay_ms)
            }
            OutcomeItem::Released(_) => Ok(()),
        }
    }

    /// What it says, as the storage seam takes it. A retryable failure that names no
    /// delay is retried after `default_retry_in()` (the server's backoff).
    pub fn into_outcome(self, default_retry_in: impl FnOnce() -> Duration) -> Outcome {
        match self {
            OutcomeItem::Completed(c) => Outcome::Completed {
                duration_ms: c.duration_ms,
            },
            OutcomeItem::Failed(f) if f.retryable => Outcome::Retry {
                error: f.error,
                retry_in: f
                    .retry_in_ms
                    .map(Duration::from_millis)
                    .unwrap_or_else(default_retry_in),
                duration_ms: f.duration_ms,
            },
            OutcomeItem::Failed(f) => Outcome::Failed {
                error: f.error,
                duration_ms: f.duration_ms,
            },
            OutcomeItem::Snoozed(s) => Outcome::Snoozed {
                retry_in: Duration::from_millis(s.delay_ms),
            },
            OutcomeItem::Released(_) => Outcome::Released,
        }
    }
}

impl Reply {
    /// The error reply for `e`: its [`ErrorCode`], its text, and for `internal` whether it
    /// is transient ([`Error::is_transient`]).
    pub fn failure(req: Option<u64>, e: &Error) -> Self {
        let code = ErrorCode::from(e);
        Reply::Error {
            req,
            code,
            message: e.to_string(),
            transient: (code == ErrorCode::Internal).then(|| e.is_transient()),
        }
    }
}

/// The error code a failed backend call is answered with.
impl From<&Error> for ErrorCode {
    fn from(e: &Error) -> Self {
        match e {
            Error::InvalidInput(_) | Error::Args(_) => ErrorCode::Invalid,
            Error::NotFound(_) => ErrorCode::NotFound,
            Error::Conflict(_) | Error::LeaseLost(_) => ErrorCode::Conflict,
            _ => ErrorCode::Internal,
        }
    }
}

/// The lines of a `log` request as a store takes them: each level parsed, fields a map,
/// messages cut and the batch kept within the bound of one attempt by
/// [`hopper_core::job_log::LogBuffer`] (what does not fit is counted in `dropped`). A
/// line without `at` is stamped `now`.
pub fn log_append(
    lease: Lease,
    lines: Vec<crate::jobs::LogLineSpec>,
    dropped: u64,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<hopper_core::job_log::JobLogAppend> {
    let mut buffer = hopper_core::job_log::LogBuffer::default();
    for (i, line) in lines.into_iter().enumerate() {
        let level = line
            .level
            .parse()
            .map_err(|e| Error::InvalidInput(format!("line {i}: {e}")))?;
        let fields = match line.fields {
            None | Some(serde_json::Value::Null) => serde_json::Map::new(),
            Some(serde_json::Value::Object(map)) => map,
            Some(_) => {
                return Err(Error::InvalidInput(format!(
                    "line {i}: fields must be a map"
                )));
            }
        };
        // Within the instants every other way into hopper takes: a year before the common
        // era parses, but no reader of the log can show it.
        let at = match line.at {
            Some(at) => hopper_core::limits::check_instant("at", at).map_err(|e| match e {
                Error::InvalidInput(why) => Error::InvalidInput(format!("line {i}: {why}")),
                other => other,
            })?,
            None => now,
        };
        buffer.push_line(hopper_core::job_log::LogLine {
            at,
            level,
            message: line.message,
            fields,
        });
    }
    let (lines, cut) = buffer.take();
    Ok(hopper_core::job_log::JobLogAppend {
        lease,
        lines,
        // A peer's own count is taken up to u32::MAX lines, so that sums of counts in the
        // store stay far from overflowing whatever a peer claims.
        dropped: cut.saturating_add(i64::from(u32::try_from(dropped).unwrap_or(u32::MAX))),
    })
}

#[cfg(test)]
mod outcome_tests {
    use super::*;

    #[test]
    fn a_run_time_below_zero_is_refused() {
        let id = uuid::Uuid::now_v7();
        let completed = |duration_ms| {
            OutcomeItem::Completed(Completed {
                id,
                attempt: 1,
                duration_ms,
            })
        };
        let failed = |duration_ms| {
            OutcomeItem::Failed(Failed {
                id,
                attempt: 1,
                error: "e".into(),
                retryable: true,
                retry_in_ms: Some(10),
                duration_ms,
            })
        };
        for item in [completed(-5), failed(-1), failed(i64::MIN)] {
            let err = item.check().expect_err("refused");
            assert!(
                matches!(&err, Error::InvalidInput(m) if m.contains("duration_ms must be 0 or more")),
                "{err}"
            );
        }
        for item in [completed(0), completed(i64::MAX), failed(0), failed(850)] {
            assert!(item.check().is_ok());
        }
    }
}

#[cfg(test)]
mod log_tests {
    use serde_json::json;

    use super::*;
    use crate::jobs::LogLineSpec;

    fn spec(level: &str, message: &str, fields: Option<serde_json::Value>) -> LogLineSpec {
        LogLineSpec {
            level: level.into(),
            message: message.into(),
            fields,
            at: None,
        }
    }

    #[test]
    fn log_lines_are_checked_cut_and_bounded() {
        let lease = Lease {
            job_id: uuid::Uuid::now_v7(),
            attempt: 2,
        };
        let now = chrono::Utc::now();
        let bad_level = log_append(lease, vec![spec("loud", "x", None)], 0, now);
        assert!(matches!(bad_level, Err(Error::InvalidInput(m)) if m.contains("line 0")));
        let bad_fields = log_append(lease, vec![spec("info", "x", Some(json!([1])))], 0, now);
        assert!(
            matches!(bad_fields, Err(Error::InvalidInput(m)) if m.contains("fields must be a map"))
        );

        let mut lines = vec![spec("warn", &"m".repeat(10_000), Some(json!({"k": 1})))];
        lines.extend(
            (0..5_000).map(|i| spec("info", &format!("line {i} {}", "x".repeat(50)), None)),
        );
        let append = log_append(lease, lines, 3, now).expect("valid lines");
        assert_eq!(append.lease, lease);
        assert!(append.lines[0].message.len() <= hopper_core::job_log::MAX_LOG_MESSAGE_BYTES);
        assert_eq!(append.lines[0].at, now);
        let kept: usize = append
            .lines
            .iter()
            .map(hopper_core::job_log::LogLine::size)
            .sum();
        assert!(kept <= hopper_core::job_log::MAX_ATTEMPT_LOG_BYTES);
        assert_eq!(append.lines.len() as i64 + append.dropped, 5_001 + 3);
    }
}
