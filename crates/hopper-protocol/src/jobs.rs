//! The job-shaped payloads of the messages: a job to submit ([`JobSpec`]), a job as stored
//! ([`JobInfo`], with its failed attempts), a job pushed to a worker ([`Order`]) and a log
//! line a worker sends ([`LogLineSpec`]). `docs/protocol.md` describes each field.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::{time_str, uuid_str};

/// A priority: a number (lower runs first) or one of `"high"`, `"normal"`, `"low"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum PriorityValue {
    /// A number from -32768 to 32767; 1 high, 2 normal, 3 low.
    Number(i16),
    /// `high`, `normal` or `low`.
    Name(String),
}

/// Read by hand rather than `untagged`, whose error says only that no variant matched.
/// A name is checked later, with the job (`"urgent"` is refused there).
impl<'de> Deserialize<'de> for PriorityValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PriorityVisitor)
    }
}

const PRIORITY_RANGE: &str = "must be -32768..32767 or high/normal/low";

struct PriorityVisitor;

impl PriorityVisitor {
    fn number<E: serde::de::Error>(
        n: impl TryInto<i16> + std::fmt::Display + Copy,
    ) -> Result<PriorityValue, E> {
        n.try_into()
            .map(PriorityValue::Number)
            .map_err(|_| E::custom(format!("{PRIORITY_RANGE}, got {n}")))
    }
}

impl serde::de::Visitor<'_> for PriorityVisitor {
    type Value = PriorityValue;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a priority: -32768..32767 or high/normal/low")
    }

    fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<PriorityValue, E> {
        Self::number(n)
    }

    fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<PriorityValue, E> {
        Self::number(n)
    }

    fn visit_i128<E: serde::de::Error>(self, n: i128) -> Result<PriorityValue, E> {
        Self::number(n)
    }

    fn visit_u128<E: serde::de::Error>(self, n: u128) -> Result<PriorityValue, E> {
        Self::number(n)
    }

    fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<PriorityValue, E> {
        Ok(PriorityValue::Name(name.to_owned()))
    }
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

fn is_empty_object(v: &serde_json::Value) -> bool {
    v.as_object().is_some_and(serde_json::Map::is_empty)
}

/// A job to submit. Only `kind` is required.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    /// The job's id (a UUID, ideally v7), chosen by the client so that a submit retried
    /// after a lost reply cannot create the job twice (the retry gets `conflict`). The
    /// server picks one (UUIDv7) when absent.
    #[serde(
        default,
        with = "uuid_str::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub id: Option<Uuid>,
    /// The kind of job: which worker runs it.
    pub kind: String,
    /// The arguments: a JSON-compatible map or array (default `{}`). Its numbers are
    /// integers from -2^63 to 2^64 - 1 or doubles: a wider integer is refused (send it as
    /// text).
    #[serde(default = "empty_object")]
    pub args: serde_json::Value,
    /// The queue (default `"default"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The priority (default normal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<PriorityValue>,
    /// Not before this instant (RFC 3339).
    #[serde(
        default,
        deserialize_with = "time_str::optional",
        skip_serializing_if = "Option::is_none"
    )]
    pub run_at: Option<DateTime<Utc>>,
    /// Not before this many milliseconds from now (by the server's clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// Attempts before the job is dead-lettered (default 25).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<i32>,
    /// How long one run may take, in milliseconds (default 30 minutes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Metadata about the job, apart from its arguments: a map of at most 16 KiB as JSON,
    /// whose `traceparent` and `tracestate`, when present, are the W3C trace context of the
    /// span that submitted it (default `{}`). Anything else than a map is refused with
    /// `invalid_job`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Value>,
}

impl JobSpec {
    /// A job of `kind` with `args` and every option at its default.
    pub fn new(kind: impl Into<String>, args: serde_json::Value) -> Self {
        JobSpec {
            id: None,
            kind: kind.into(),
            args,
            queue: None,
            priority: None,
            run_at: None,
            delay_ms: None,
            max_attempts: None,
            timeout_ms: None,
            meta: None,
        }
    }
}

/// One failed attempt in a job's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptInfo {
    /// The attempt.
    pub attempt: i32,
    /// When the failure was recorded.
    pub at: DateTime<Utc>,
    /// What went wrong.
    pub error: String,
    /// How long it ran, if known.
    #[serde(default)]
    pub duration_ms: Option<i64>,
}

/// One log line as a worker sends it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogLineSpec {
    /// `trace`, `debug`, `info`, `warn` or `error`.
    pub level: String,
    /// What happened (cut at 4 KiB).
    pub message: String,
    /// Structured details: a map (default none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<serde_json::Value>,
    /// When it was written (RFC 3339; default: when the server received it).
    #[serde(
        default,
        deserialize_with = "time_str::optional",
        skip_serializing_if = "Option::is_none"
    )]
    pub at: Option<DateTime<Utc>>,
}

/// A job as stored, in `status` and `cancel` replies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    /// The job's id.
    #[serde(with = "uuid_str")]
    pub id: Uuid,
    /// Its queue.
    pub queue: String,
    /// Its kind.
    pub kind: String,
    /// Its arguments; null in a `list_jobs` reply when they were left out there
    /// (`args_bytes`).
    pub args: serde_json::Value,
    /// `scheduled`, `available`, `running`, `completed`, `failed` or `cancelled`.
    pub state: String,
    /// Its priority (lower runs first).
    pub priority: i16,
    /// When it may run (next).
    pub run_at: DateTime<Utc>,
    /// Claims so far (the current lease's attempt number).
    pub attempt: i32,
    /// Attempts used against `max_attempts`.
    pub attempts_used: i32,
    /// Attempts before it is dead-lettered.
    pub max_attempts: i32,
    /// How long one run may take, in milliseconds.
    pub timeout_ms: i32,
    /// When it was inserted.
    pub created_at: DateTime<Utc>,
    /// When its latest attempt started.
    #[serde(default)]
    pub attempted_at: Option<DateTime<Utc>>,
    /// When it finished.
    #[serde(default)]
    pub finished_at: Option<DateTime<Utc>>,
    /// How long its successful run took, in milliseconds.
    #[serde(default)]
    pub duration_ms: Option<i64>,
    /// The failed attempts, oldest first: the latest 20 (`MAX_ERROR_HISTORY`).
    #[serde(default)]
    pub errors: Vec<AttemptInfo>,
    /// Its metadata (a map; `{}` when it has none); null in a `list_jobs` reply when it
    /// was left out there (`meta_bytes`).
    #[serde(default = "empty_object")]
    pub meta: serde_json::Value,
    /// In a `list_jobs` reply, the size of `args` as JSON text, in bytes, when it is larger
    /// than `hopper_core::LISTED_VALUE_BYTES` (4 KiB) and so left out (`args` is null).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args_bytes: Option<u64>,
    /// In a `list_jobs` reply, the size of `meta` as JSON text, in bytes, when it is larger
    /// than `hopper_core::LISTED_VALUE_BYTES` (4 KiB) and so left out (`meta` is null).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta_bytes: Option<u64>,
}

/// A job for a worker to run, pushed by the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Order {
    /// The job.
    #[serde(with = "uuid_str")]
    pub id: Uuid,
    /// The attempt: with `id`, the lease to report with.
    pub attempt: i32,
    /// Its queue.
    pub queue: String,
    /// Its kind.
    pub kind: String,
    /// Its arguments.
    pub args: serde_json::Value,
    /// Its priority.
    pub priority: i16,
    /// Which counted attempt this is (1 for the first).
    pub counted_attempt: i32,
    /// Attempts before it is dead-lettered.
    pub max_attempts: i32,
    /// How long this run may take, in milliseconds.
    pub timeout_ms: u64,
    /// When the job was inserted.
    pub created_at: DateTime<Utc>,
    /// When it was due.
    pub run_at: DateTime<Utc>,
    /// Its metadata, with the W3C trace context of the span that submitted it (its
    /// `traceparent`), if any. Absent when the job has none: read a missing field as `{}`.
    #[serde(default = "empty_object", skip_serializing_if = "is_empty_object")]
    pub meta: serde_json::Value,
}
