//! What a job is: the row a client inserts ([`NewJob`]), the row as stored
//! ([`JobRecord`]), its [`JobState`] and [`Priority`], and the validation applied to every
//! job before anything is written.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::limits;
use crate::meta::{self, has_nul, json_type};
use crate::scheduling::UniquePolicy;

/// A job's id: a UUIDv7, so ids are ordered by creation time and the primary-key index
/// grows at its right edge instead of being split at random pages.
pub type JobId = Uuid;

/// The queue a job goes to when none is named.
pub const DEFAULT_QUEUE: &str = "default";

/// How many times a job is tried before it is dead-lettered, when not said otherwise.
pub const DEFAULT_MAX_ATTEMPTS: i32 = 25;

/// How long one run of a job may take, when not said otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// The largest job arguments accepted, as encoded JSON text (1 MiB). Larger payloads belong
/// in the application's own storage, with a reference in the job.
pub const MAX_ARGS_BYTES: usize = 1024 * 1024;

/// The largest `args` or `meta` a listing carries, as JSON text (4 KiB). A larger one is
/// left out of a listing ([`crate::Backend::job_list`], [`crate::Backend::job_search`],
/// and every door built on them): its field is `null` and [`JobRecord::args_bytes`] or
/// [`JobRecord::meta_bytes`] says its size, so that a page of jobs stays a few KiB a job
/// however large the jobs are. Reading one job ([`crate::Backend::job_get`]) gives it
/// whole. Backends decide it in SQL, so a left-out value is never read into the process.
pub const LISTED_VALUE_BYTES: usize = 4 * 1024;

/// The longest queue, kind or key name accepted.
pub const MAX_NAME_LEN: usize = 128;

/// The lifecycle of a job. See `docs/state-machine.md` for the diagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    /// Waiting for its `run_at` (inserted for later, or retrying after a backoff).
    Scheduled,
    /// Ready to run now.
    Available,
    /// Claimed by a worker, which holds a lease.
    Running,
    /// Finished successfully.
    Completed,
    /// Dead letter: attempts exhausted or failed permanently. Retry by hand to run again.
    Failed,
    /// Cancelled before it could complete.
    Cancelled,
}

impl JobState {
    /// All states, in lifecycle order.
    pub const ALL: [JobState; 6] = [
        JobState::Scheduled,
        JobState::Available,
        JobState::Running,
        JobState::Completed,
        JobState::Failed,
        JobState::Cancelled,
    ];

    /// The state's name as stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Scheduled => "scheduled",
            JobState::Available => "available",
            JobState::Running => "running",
            JobState::Completed => "completed",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    /// True for states a job never leaves by itself.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            JobState::Completed | JobState::Failed | JobState::Cancelled
        )
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for JobState {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        JobState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| {
                Error::InvalidInput(format!(
                    "unknown state {:?}: expected scheduled, available, running, completed, failed or cancelled",
                    crate::log_limit::capped(s).to_string()
                ))
            })
    }
}

/// A job's priority: lower numbers run first. Jobs of equal priority run in `run_at`
/// order, then in id (creation) order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Priority(pub i16);

impl Priority {
    /// Runs before normal and low jobs.
    pub const HIGH: Priority = Priority(1);
    /// The default.
    pub const NORMAL: Priority = Priority(2);
    /// Runs when no high or normal job is ready.
    pub const LOW: Priority = Priority(3);
}

impl Default for Priority {
    fn default() -> Self {
        Priority::NORMAL
    }
}

impl FromStr for Priority {
    type Err = Error;

    /// Parses `high`, `normal`, `low` (any case) or a number from -32768 to 32767.
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "high" => Ok(Priority::HIGH),
            "normal" => Ok(Priority::NORMAL),
            "low" => Ok(Priority::LOW),
            other => other.parse::<i16>().map(Priority).map_err(|_| {
                Error::InvalidInput(format!(
                    "unknown priority {:?}: expected high, normal, low or a number from -32768 to 32767",
                    crate::log_limit::capped(s).to_string()
                ))
            }),
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Priority::HIGH => f.write_str("high"),
            Priority::NORMAL => f.write_str("normal"),
            Priority::LOW => f.write_str("low"),
            Priority(n) => write!(f, "{n}"),
        }
    }
}

/// Typed job arguments: a serde type that names the kind of job it is.
///
/// ```
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct SendEmail { to: String }
///
/// impl hopper_core::JobArgs for SendEmail {
///     const KIND: &'static str = "send_email";
/// }
/// ```
pub trait JobArgs: Serialize + serde::de::DeserializeOwned + Send + Sync + 'static {
    /// The kind name stored with each job; the worker registered for it runs the job.
    const KIND: &'static str;
}

/// A job to insert. Build one with [`NewJob::new`] and the `with_*` methods; every entry
/// point calls [`NewJob::validate`] before writing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewJob {
    /// The job's id; generated (UUIDv7) by [`NewJob::new`].
    pub id: JobId,
    /// The queue it goes to.
    pub queue: String,
    /// The kind of job: which worker runs it.
    pub kind: String,
    /// The arguments, as JSON. Must be an object or array, at most [`MAX_ARGS_BYTES`]. Its
    /// numbers are 64-bit integers or doubles ([`crate::json_numbers`]): send a wider
    /// integer as a string.
    pub args: serde_json::Value,
    /// Lower runs first.
    pub priority: Priority,
    /// Not before this instant; `None` means now.
    pub run_at: Option<DateTime<Utc>>,
    /// Attempts before the job is dead-lettered.
    pub max_attempts: i32,
    /// How long one run may take.
    pub timeout: Duration,
    /// The group (tenant) the job belongs to: within its queue, groups take turns so one
    /// group's backlog cannot starve the others. `None`: no group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// At most one job with this key is scheduled, available or running at a time (and,
    /// with [`NewJob::unique_window`], one per window). `None`: no uniqueness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_key: Option<String>,
    /// What an insert does when the key is taken. Default: [`UniquePolicy::Ignore`].
    #[serde(default)]
    pub unique_policy: UniquePolicy,
    /// Keeps the key taken for the rest of this window after the job finished: one job per
    /// key per window (epoch-aligned windows of this length, placed by the job's `run_at`,
    /// or the insert time when due now). `None`: only while unfinished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_window: Option<Duration>,
    /// Metadata about the job, apart from its arguments: the W3C trace context of the span
    /// that enqueued it ([`meta::TRACEPARENT`]), a tenant, a user. At most
    /// [`meta::MAX_META_BYTES`] as JSON. Empty by default.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub meta: serde_json::Map<String, serde_json::Value>,
}

impl NewJob {
    /// A job of `kind` with `args`, on the default queue, normal priority, to run now.
    pub fn new(kind: impl Into<String>, args: serde_json::Value) -> Self {
        NewJob {
            id: Uuid::now_v7(),
            queue: DEFAULT_QUEUE.to_owned(),
            kind: kind.into(),
            args,
            priority: Priority::NORMAL,
            run_at: None,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            timeout: DEFAULT_TIMEOUT,
            group: None,
            unique_key: None,
            unique_policy: UniquePolicy::Ignore,
            unique_window: None,
            meta: serde_json::Map::new(),
        }
    }

    /// A job of `A::KIND` with `args` encoded as JSON, otherwise like [`NewJob::new`].
    pub fn of<A: JobArgs>(args: &A) -> Result<Self> {
        Ok(NewJob::new(A::KIND, serde_json::to_value(args)?))
    }

    /// Sets the queue.
    pub fn with_queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = queue.into();
        self
    }

    /// Sets the priority.
    pub fn with_priority(mut self, priority: Priority) -> Self {
        self.priority = priority;
        self
    }

    /// Runs the job not before `at`.
    pub fn with_run_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some(at);
        self
    }

    /// Runs the job not before `delay` from now (by this machine's clock). A delay over
    /// [`limits::MAX_DURATION`] makes [`NewJob::validate`] refuse the job.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        // Past the bound, an instant validate refuses, so the job is never written.
        self.run_at = Some(
            limits::instant_after("delay", Utc::now(), delay).unwrap_or(DateTime::<Utc>::MAX_UTC),
        );
        self
    }

    /// Sets the maximum number of attempts.
    pub fn with_max_attempts(mut self, max_attempts: i32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// Sets how long one run may take.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Puts the job in a group (a tenant): groups of a queue take turns.
    pub fn with_group(mut self, group: impl Into<String>) -> Self {
        self.group = Some(group.into());
        self
    }

    /// Gives the job a unique key (see [`NewJob::unique_key`]) with the default policy.
    pub fn with_unique_key(mut self, key: impl Into<String>) -> Self {
        self.unique_key = Some(key.into());
        self
    }

    /// Sets what an insert does when the unique key is taken.
    pub fn with_unique_policy(mut self, policy: UniquePolicy) -> Self {
        self.unique_policy = policy;
        self
    }

    /// Keeps the unique key taken for the rest of a window of this length (see
    /// [`NewJob::unique_window`]).
    pub fn with_unique_window(mut self, window: Duration) -> Self {
        self.unique_window = Some(window);
        self
    }

    /// Replaces the job's metadata (see [`NewJob::meta`]).
    pub fn with_meta(mut self, meta: serde_json::Map<String, serde_json::Value>) -> Self {
        self.meta = meta;
        self
    }

    /// Sets one entry of the job's metadata, keeping the others.
    pub fn with_meta_entry(
        mut self,
        key: impl Into<String>,
        value: impl Into<serde_json::Value>,
    ) -> Self {
        self.meta.insert(key.into(), value.into());
        self
    }

    /// The metadata as a JSON object value, as stored.
    pub fn meta_value(&self) -> serde_json::Value {
        serde_json::Value::Object(self.meta.clone())
    }

    /// True when the job needs more than a plain insert: a group or a unique key.
    pub fn needs_upsert(&self) -> bool {
        self.group.is_some() || self.unique_key.is_some()
    }

    /// The start of the unique window `at` falls in (windows are aligned to the Unix
    /// epoch), or `None` without a window.
    pub fn unique_window_start(&self, at: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let window = i64::try_from(self.unique_window?.as_millis()).ok()?.max(1);
        let ms = at.timestamp_millis();
        DateTime::from_timestamp_millis(ms - ms.rem_euclid(window))
    }

    /// The end of the unique window that starts at `start` ([`NewJob::unique_window_start`]):
    /// stored with the job, so that pruning keeps a finished holder until then. `None`
    /// without a window, or past the instants chrono holds.
    pub fn unique_window_end(&self, start: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let window = chrono::Duration::from_std(self.unique_window?).ok()?;
        start.checked_add_signed(window)
    }

    /// The timeout in whole milliseconds, as stored.
    pub fn timeout_ms(&self) -> i32 {
        i32::try_from(self.timeout.as_millis()).unwrap_or(i32::MAX)
    }

    /// Checks everything the database would also refuse, so that a bad job is reported
    /// clearly and nothing of its batch is written.
    pub fn validate(&self) -> Result<()> {
        validate_name("queue", &self.queue)?;
        validate_name("kind", &self.kind)?;
        if !(self.args.is_object() || self.args.is_array()) {
            return Err(Error::InvalidInput(format!(
                "args must be a JSON object or array, got {}",
                json_type(&self.args)
            )));
        }
        let size = meta::json_size(&self.args);
        if size > MAX_ARGS_BYTES {
            return Err(Error::InvalidInput(format!(
                "args are {size} bytes as JSON, over the limit of {MAX_ARGS_BYTES} bytes"
            )));
        }
        if has_nul(&self.args) {
            return Err(Error::InvalidInput(
                "args must not contain the character U+0000 (\\u0000): PostgreSQL cannot store it in JSON"
                    .into(),
            ));
        }
        meta::validate_meta_map(&self.meta)?;
        if self.max_attempts < 1 {
            return Err(Error::InvalidInput(format!(
                "max_attempts must be at least 1, got {}",
                self.max_attempts
            )));
        }
        if self.timeout < Duration::from_millis(1) || self.timeout > limits::MAX_TIMEOUT {
            return Err(Error::InvalidInput(format!(
                "timeout must be between 1 ms and {} ms, got {:?}",
                limits::MAX_TIMEOUT.as_millis(),
                self.timeout
            )));
        }
        if let Some(at) = self.run_at {
            limits::check_instant("run_at", at)?;
        }
        if let Some(group) = &self.group {
            validate_name("group", group)?;
        }
        if let Some(key) = &self.unique_key {
            validate_unique_key(key)?;
        }
        if self.unique_key.is_none() && self.unique_policy != UniquePolicy::Ignore {
            return Err(Error::InvalidInput(
                "a unique policy needs a unique key".into(),
            ));
        }
        if let Some(window) = self.unique_window {
            if self.unique_key.is_none() {
                return Err(Error::InvalidInput(
                    "a unique window needs a unique key".into(),
                ));
            }
            if window < Duration::from_millis(1) {
                return Err(Error::InvalidInput(
                    "a unique window must be at least 1 ms".into(),
                ));
            }
            limits::check_duration("unique window", window)?;
        }
        Ok(())
    }
}

/// The longest unique key accepted, in bytes.
pub const MAX_UNIQUE_KEY_LEN: usize = 255;

/// Checks a unique key: 1 to 255 bytes, no control characters. Unlike names, keys may hold
/// any other text (`user:42/welcome mail`), since they only ever travel as parameters.
pub fn validate_unique_key(key: &str) -> Result<()> {
    if key.is_empty() || key.len() > MAX_UNIQUE_KEY_LEN {
        return Err(Error::InvalidInput(format!(
            "unique key must be 1 to {MAX_UNIQUE_KEY_LEN} bytes, got {}",
            key.len()
        )));
    }
    if key.chars().any(char::is_control) {
        return Err(Error::InvalidInput(
            "unique key must not contain control characters".into(),
        ));
    }
    Ok(())
}

/// How far ahead of the server's clock a job id chosen by a client may be dated.
pub const MAX_ID_AHEAD: Duration = Duration::from_secs(24 * 3600);

/// Checks a job id chosen by a client (over HTTP or `hopper serve`), at `now`: a UUIDv7,
/// so that ids sort by creation (listing newest first, paging with `before`, a batch's
/// FIFO order), dated at most [`MAX_ID_AHEAD`] past `now` (clocks drift; an id dated
/// years ahead would list first for years). An id dated in the past is taken: a client
/// may retry a submit long after it made the id.
///
/// ```
/// use hopper_core::job::validate_chosen_id;
/// let now = chrono::Utc::now();
/// assert!(validate_chosen_id(uuid::Uuid::now_v7(), now).is_ok());
/// let v4 = "4bf92f35-77b3-4da6-a3ce-929d0e0e4736".parse().unwrap();
/// assert!(validate_chosen_id(v4, now).is_err());
/// let far = "ffffffff-ffff-7fff-bfff-ffffffffffff".parse().unwrap();
/// assert!(validate_chosen_id(far, now).is_err());
/// ```
pub fn validate_chosen_id(id: Uuid, now: DateTime<Utc>) -> Result<()> {
    if id.get_version_num() != 7 {
        return Err(Error::InvalidInput(format!(
            "id {id} is a UUID of version {}; job ids are time-ordered UUIDv7 (or leave the id out)",
            id.get_version_num()
        )));
    }
    let (secs, nanos) = id.get_timestamp().map_or((0, 0), |t| t.to_unix());
    let dated = DateTime::<Utc>::from_timestamp(i64::try_from(secs).unwrap_or(i64::MAX), nanos);
    let latest = now + chrono::Duration::from_std(MAX_ID_AHEAD).unwrap_or_default();
    match dated {
        Some(dated) if dated <= latest => Ok(()),
        _ => Err(Error::InvalidInput(format!(
            "id {id} is dated {}, more than a day ahead of the server's clock; make ids \
             with the current time (or leave the id out)",
            dated.map_or_else(|| "beyond the year 9999".to_owned(), |d| d.to_rfc3339())
        ))),
    }
}

/// Checks a queue, kind or key name: 1 to 128 characters from `A-Z a-z 0-9 _ - . :`.
///
/// Names reach logs, metrics labels, URLs and NOTIFY payloads; keeping them plain keeps all
/// of those safe, whatever a caller sends.
pub fn validate_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(Error::InvalidInput(format!(
            "{what} name must be 1 to {MAX_NAME_LEN} characters, got {}",
            name.len()
        )));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':')))
    {
        return Err(Error::InvalidInput(format!(
            "{what} name {:?} has the character {bad:?}; allowed are A-Z a-z 0-9 _ - . :",
            crate::log_limit::capped(name).to_string()
        )));
    }
    Ok(())
}

/// One failed attempt, as kept in the job's error history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptError {
    /// The attempt that failed.
    pub attempt: i32,
    /// When the failure was recorded.
    pub at: DateTime<Utc>,
    /// What went wrong.
    pub error: String,
    /// The node that ran the attempt, if known.
    pub node: Option<Uuid>,
    /// How long the attempt ran, in milliseconds, if known.
    pub duration_ms: Option<i64>,
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// The job's id.
    pub id: JobId,
    /// Its queue.
    pub queue: String,
    /// Its kind.
    pub kind: String,
    /// Its arguments. A number is read as a 64-bit integer or a double: an integer beyond
    /// 64 bits, which only SQL can store, is read rounded ([`crate::json_numbers`]). `null`
    /// in a listing when they were left out there ([`JobRecord::args_bytes`]).
    pub args: serde_json::Value,
    /// Its state.
    pub state: JobState,
    /// Its priority (lower runs first).
    pub priority: Priority,
    /// When it may run (next).
    pub run_at: DateTime<Utc>,
    /// Claims so far; the current lease's attempt number.
    pub attempt: i32,
    /// Claims that did not count against `max_attempts` (snoozed, released, retried by hand).
    pub uncounted: i32,
    /// Attempts before it is dead-lettered.
    pub max_attempts: i32,
    /// How long one run may take, in milliseconds.
    pub timeout_ms: i32,
    /// The node holding it, while running.
    pub node_id: Option<Uuid>,
    /// When the current lease expires, while running.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// When it was inserted.
    pub created_at: DateTime<Utc>,
    /// When its latest attempt started.
    pub attempted_at: Option<DateTime<Utc>>,
    /// When it reached a finished state.
    pub finished_at: Option<DateTime<Utc>>,
    /// How long its successful run took, in milliseconds.
    pub duration_ms: Option<i64>,
    /// Its failed attempts, oldest first: the most recent
    /// [`MAX_ERROR_HISTORY`](crate::limits::MAX_ERROR_HISTORY).
    pub errors: Vec<AttemptError>,
    /// Its group (tenant) within the queue, if it has one.
    #[serde(default)]
    pub group: Option<String>,
    /// Its unique key, if it has one.
    #[serde(default)]
    pub unique_key: Option<String>,
    /// Its metadata: always a JSON object, `{}` when it has none; `null` in a listing when
    /// it was left out there ([`JobRecord::meta_bytes`]).
    #[serde(default = "meta::empty")]
    pub meta: serde_json::Value,
    /// In a listing, the size of `args` as JSON text, in bytes, when it is larger than
    /// [`LISTED_VALUE_BYTES`] and so left out (`args` is then `null`); `None` when `args`
    /// is there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args_bytes: Option<u64>,
    /// In a listing, the size of `meta` as JSON text, in bytes, when it is larger than
    /// [`LISTED_VALUE_BYTES`] and so left out (`meta` is then `null`); `None` when `meta`
    /// is there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta_bytes: Option<u64>,
}

impl JobRecord {
    /// Reads the size of a value a listing left out, as a backend's query gives it (SQL
    /// NULL when the value is there).
    pub fn left_out_size(bytes: Option<i64>) -> crate::Result<Option<u64>> {
        bytes
            .map(|n| {
                u64::try_from(n)
                    .map_err(|_| crate::Error::Schema(format!("a left-out value's size is {n}")))
            })
            .transpose()
    }

    /// Whether a listing left out its `args` or its `meta` ([`LISTED_VALUE_BYTES`]): read
    /// the job alone ([`crate::Backend::job_get`]) to have them.
    pub fn is_abridged(&self) -> bool {
        self.args_bytes.is_some() || self.meta_bytes.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_refuse_injection_characters() {
        for bad in ["", "a'b", "q;drop table x", "a b", "ünï", &"x".repeat(129)] {
            assert!(validate_name("queue", bad).is_err(), "{bad:?} accepted");
        }
        for good in ["default", "mail.send", "billing:eu-1", "A_b"] {
            assert!(validate_name("queue", good).is_ok(), "{good:?} refused");
        }
    }

    #[test]
    fn a_unique_policy_or_window_needs_a_unique_key() {
        let job = || NewJob::new("k", json!({}));
        for policy in [UniquePolicy::Reject, UniquePolicy::Replace] {
            let e = job().with_unique_policy(policy).validate();
            assert!(
                matches!(&e, Err(Error::InvalidInput(m)) if m.contains("needs a unique key")),
                "{policy:?}: {e:?}"
            );
            let keyed = job().with_unique_key("k").with_unique_policy(policy);
            assert!(keyed.validate().is_ok(), "{policy:?}");
        }
        let window = job().with_unique_window(Duration::from_secs(1)).validate();
        assert!(window.is_err(), "{window:?}");
        assert!(job().validate().is_ok());
    }

    #[test]
    fn priorities_parse_by_name_and_number() {
        assert_eq!("HIGH".parse::<Priority>().ok(), Some(Priority::HIGH));
        assert_eq!("-5".parse::<Priority>().ok(), Some(Priority(-5)));
        assert!("urgent".parse::<Priority>().is_err());
        assert!("40000".parse::<Priority>().is_err());
    }

    #[test]
    fn oversized_and_scalar_args_are_refused() {
        let big = json!({ "blob": "x".repeat(MAX_ARGS_BYTES) });
        assert!(NewJob::new("k", big).validate().is_err());
        assert!(NewJob::new("k", json!(3)).validate().is_err());
        assert!(NewJob::new("k", json!({"n": 1})).validate().is_ok());
        assert!(
            NewJob::new("k", json!({"a": ["x\u{0}"]}))
                .validate()
                .is_err()
        );
        assert!(NewJob::new("k", json!({"\u{0}": 1})).validate().is_err());
        for at in [DateTime::<Utc>::MAX_UTC, DateTime::<Utc>::MIN_UTC] {
            assert!(
                NewJob::new("k", json!({}))
                    .with_run_at(at)
                    .validate()
                    .is_err()
            );
        }
        let far = NewJob::new("k", json!({})).with_delay(limits::MAX_DURATION * 2);
        assert!(far.validate().is_err());
        let year = NewJob::new("k", json!({})).with_delay(Duration::from_secs(365 * 86_400));
        assert!(year.validate().is_ok());
        assert!(
            NewJob::new("k", json!({}))
                .with_max_attempts(0)
                .validate()
                .is_err()
        );
    }
}
