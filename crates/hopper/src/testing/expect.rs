//! [`ExpectedJob`]: what a test expects to find enqueued, and how a stored job is compared
//! with it.

use std::fmt;

use hopper_core::{JobArgs, JobRecord, JobState, Priority};
use serde_json::Value;

/// How the expected arguments are compared with a job's.
#[derive(Debug, Clone, PartialEq)]
enum ArgsMatch {
    /// Any arguments.
    Any,
    /// Equal as JSON values.
    Exact(Value),
    /// The expected value is a subset of the job's (see [`ExpectedJob::args_containing`]).
    Subset(Value),
    /// The typed arguments did not encode as JSON: nothing matches, and the failure says why.
    Unencodable(String),
}

/// A job a test expects to have been enqueued (or not): a kind, its arguments (exactly or
/// a subset, or any), and optionally its queue, priority, maximum attempts and state.
///
/// ```
/// use hopper::testing::ExpectedJob;
/// use hopper::{JobArgs, JobState, Priority};
/// use serde::{Deserialize, Serialize};
/// use serde_json::json;
///
/// #[derive(Serialize, Deserialize)]
/// struct SendEmail { to: String, template: String }
///
/// impl JobArgs for SendEmail {
///     const KIND: &'static str = "send_email";
/// }
///
/// // This kind with exactly these arguments, on the queue "mail", ready to run:
/// let exact = ExpectedJob::of(&SendEmail { to: "ada@example.com".into(), template: "welcome".into() })
///     .queue("mail")
///     .state(JobState::Available);
/// // This kind with at least `{"to": "ada@example.com"}` in its arguments, high priority:
/// let partial = ExpectedJob::kind("send_email")
///     .args_containing(json!({ "to": "ada@example.com" }))
///     .priority(Priority::HIGH);
/// # let _ = (exact, partial);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ExpectedJob {
    kind: String,
    args: ArgsMatch,
    queue: Option<String>,
    priority: Option<Priority>,
    max_attempts: Option<i32>,
    state: Option<JobState>,
}

impl ExpectedJob {
    /// A job of `A::KIND` whose arguments equal `args` (as JSON).
    pub fn of<A: JobArgs>(args: &A) -> Self {
        let args = match serde_json::to_value(args) {
            Ok(value) => ArgsMatch::Exact(value),
            Err(e) => ArgsMatch::Unencodable(e.to_string()),
        };
        ExpectedJob {
            args,
            ..ExpectedJob::kind(A::KIND)
        }
    }

    /// A job of `kind`, whatever its arguments.
    pub fn kind(kind: impl Into<String>) -> Self {
        ExpectedJob {
            kind: kind.into(),
            args: ArgsMatch::Any,
            queue: None,
            priority: None,
            max_attempts: None,
            state: None,
        }
    }

    /// The job's arguments must equal `args`.
    pub fn args(mut self, args: Value) -> Self {
        self.args = ArgsMatch::Exact(args);
        self
    }

    /// The job's arguments must contain `subset`: every key of an object in `subset` is in
    /// the job's object at the same place, with a value that in turn contains the expected
    /// one; arrays must have the same length, element by element; other values must be
    /// equal. `json!({"user": {"id": 7}})` matches `{"user": {"id": 7, "name": "Ada"}, "n": 1}`.
    pub fn args_containing(mut self, subset: Value) -> Self {
        self.args = ArgsMatch::Subset(subset);
        self
    }

    /// The job must be on `queue`.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// The job must have `priority`.
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = Some(priority);
        self
    }

    /// The job must allow `max_attempts` attempts.
    pub fn max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// The job must be in `state` (for instance [`JobState::Scheduled`] for a job enqueued
    /// to run later).
    pub fn state(mut self, state: JobState) -> Self {
        self.state = Some(state);
        self
    }

    /// The kind expected.
    pub fn expected_kind(&self) -> &str {
        &self.kind
    }

    /// True when `job` is such a job.
    pub fn matches(&self, job: &JobRecord) -> bool {
        let args = match &self.args {
            ArgsMatch::Any => true,
            ArgsMatch::Exact(expected) => *expected == job.args,
            ArgsMatch::Subset(expected) => contains(&job.args, expected),
            ArgsMatch::Unencodable(_) => false,
        };
        job.kind == self.kind
            && args
            && self.queue.as_ref().is_none_or(|q| *q == job.queue)
            && self.priority.is_none_or(|p| p == job.priority)
            && self.max_attempts.is_none_or(|m| m == job.max_attempts)
            && self.state.is_none_or(|s| s == job.state)
    }
}

impl fmt::Display for ExpectedJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kind {:?}", self.kind)?;
        match &self.args {
            ArgsMatch::Any => {}
            ArgsMatch::Exact(args) => write!(f, ", args exactly {args}")?,
            ArgsMatch::Subset(args) => write!(f, ", args containing {args}")?,
            ArgsMatch::Unencodable(e) => write!(f, ", args that failed to encode as JSON ({e})")?,
        }
        if let Some(queue) = &self.queue {
            write!(f, ", queue {queue:?}")?;
        }
        if let Some(priority) = self.priority {
            write!(f, ", priority {priority}")?;
        }
        if let Some(max_attempts) = self.max_attempts {
            write!(f, ", max attempts {max_attempts}")?;
        }
        if let Some(state) = self.state {
            write!(f, ", state {state}")?;
        }
        Ok(())
    }
}

/// True when `actual` contains `expected` (see [`ExpectedJob::args_containing`]).
fn contains(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Object(actual), Value::Object(expected)) => expected
            .iter()
            .all(|(key, e)| actual.get(key).is_some_and(|a| contains(a, e))),
        (Value::Array(actual), Value::Array(expected)) => {
            actual.len() == expected.len()
                && actual.iter().zip(expected).all(|(a, e)| contains(a, e))
        }
        (actual, expected) => actual == expected,
    }
}

/// One line describing a stored job, for failure messages.
pub(crate) fn describe(job: &JobRecord) -> String {
    format!(
        "{} kind {:?} queue {:?} priority {} max attempts {} state {} args {}",
        job.id, job.kind, job.queue, job.priority, job.max_attempts, job.state, job.args
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subsets_match_nested_objects_and_whole_arrays() {
        let job = json!({"user": {"id": 7, "name": "Ada"}, "tags": ["a", "b"], "n": 1});
        assert!(contains(&job, &json!({})));
        assert!(contains(&job, &json!({"user": {"id": 7}})));
        assert!(contains(&job, &json!({"tags": ["a", "b"], "n": 1})));
        assert!(!contains(&job, &json!({"user": {"id": 8}})));
        assert!(
            !contains(&job, &json!({"tags": ["a"]})),
            "arrays match whole"
        );
        assert!(!contains(&job, &json!({"missing": null})));
        assert!(
            !contains(&job, &json!({"n": "1"})),
            "no conversion between types"
        );
    }
}
