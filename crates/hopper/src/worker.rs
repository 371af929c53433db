//! The `Worker` trait: what a job handler implements, and how its result is reported.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use hopper_core::JobArgs;

use crate::context::JobContext;

/// A handler for one kind of job, over typed arguments.
///
/// ```
/// use hopper::{JobArgs, JobContext, JobError, Worker};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Resize { image: String, width: u32 }
///
/// impl JobArgs for Resize {
///     const KIND: &'static str = "resize";
/// }
///
/// struct Resizer;
///
/// #[async_trait::async_trait]
/// impl Worker for Resizer {
///     type Args = Resize;
///
///     async fn process(&self, ctx: &JobContext, args: Resize) -> Result<(), JobError> {
///         if args.width == 0 {
///             return Err(JobError::permanent("width must be positive"));
///         }
///         // Heavy CPU work goes to the blocking pool, off the async threads.
///         let width = args.width;
///         ctx.blocking(move || width * 2).await?;
///         Ok(())
///     }
/// }
/// ```
#[async_trait]
pub trait Worker: Send + Sync + 'static {
    /// The job arguments this worker takes; `Args::KIND` names the kind of job.
    type Args: JobArgs;

    /// Runs one attempt. `Ok` completes the job; an error retries it, fails it for good or
    /// snoozes it (see [`JobError`]). A panic counts as a failed attempt.
    async fn process(&self, ctx: &JobContext, args: Self::Args) -> Result<(), JobError>;

    /// Overrides the timeout stored with each job of this kind. Held to
    /// [`hopper_core::limits::MAX_DURATION`] (ten years; `Duration::MAX` for "never" is
    /// fine).
    fn timeout(&self) -> Option<Duration> {
        None
    }

    /// The delay before retrying after failed attempt number `attempt` (1 for the first).
    /// A delay past [`hopper_core::limits::MAX_DURATION`] (ten years) is held to it, as
    /// every retry and snooze delay is; if this panics, the attempt's failure is recorded
    /// with the panic and [`default_backoff`].
    fn backoff(&self, attempt: i32) -> Duration {
        default_backoff(attempt)
    }
}

/// Exponential backoff with jitter: about 2^attempt seconds (2 s, 4 s, 8 s, …), capped at
/// one hour, each spread ±10% so retries of a burst do not arrive together.
pub fn default_backoff(attempt: i32) -> Duration {
    let exp = attempt.clamp(1, 12) as u32;
    let base = Duration::from_secs(2u64.pow(exp)).min(Duration::from_secs(3600));
    let jitter = rand::random_range(0.9..1.1);
    base.mul_f64(jitter)
}

/// Why an attempt did not complete.
///
/// Any `std::error::Error` converts into a retryable `JobError` with `?`. Built with
/// [`JobError::retry`], [`JobError::retry_after`], [`JobError::permanent`] and
/// [`JobError::snooze`]; new kinds of outcome, or new details of one, may be added without
/// a breaking change (the enum and its `Retry` variant are `#[non_exhaustive]`).
#[non_exhaustive]
pub enum JobError {
    /// Try again after the worker's backoff (or `retry_in`, when given), while attempts last.
    #[non_exhaustive]
    Retry {
        /// What went wrong.
        message: String,
        /// Overrides the worker's backoff for this retry.
        retry_in: Option<Duration>,
    },
    /// Do not try again: the job is dead-lettered now.
    Permanent(String),
    /// Run again after this delay without using up an attempt.
    Snooze(Duration),
}

impl JobError {
    /// A retryable failure.
    pub fn retry(message: impl fmt::Display) -> Self {
        JobError::Retry {
            message: message.to_string(),
            retry_in: None,
        }
    }

    /// A retryable failure, retried after `delay` instead of the worker's backoff.
    pub fn retry_after(message: impl fmt::Display, delay: Duration) -> Self {
        JobError::Retry {
            message: message.to_string(),
            retry_in: Some(delay),
        }
    }

    /// A failure that must not be retried.
    pub fn permanent(message: impl fmt::Display) -> Self {
        JobError::Permanent(message.to_string())
    }

    /// Run again after `delay`, without counting an attempt.
    pub fn snooze(delay: Duration) -> Self {
        JobError::Snooze(delay)
    }
}

impl<E: std::error::Error + Send + Sync + 'static> From<E> for JobError {
    fn from(e: E) -> Self {
        JobError::retry(e)
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobError::Retry { message, retry_in } => {
                write!(f, "Retry({message:?}, {retry_in:?})")
            }
            JobError::Permanent(m) => write!(f, "Permanent({m:?})"),
            JobError::Snooze(d) => write!(f, "Snooze({d:?})"),
        }
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobError::Retry { message, .. } | JobError::Permanent(message) => f.write_str(message),
            JobError::Snooze(d) => write!(f, "snoozed for {d:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let first = default_backoff(1);
        assert!(first >= Duration::from_millis(1800) && first <= Duration::from_millis(2200));
        let late = default_backoff(40);
        assert!(late <= Duration::from_secs(3960));
        assert!(default_backoff(5) > default_backoff(2));
    }
}
