//! The payloads of the admin requests and replies: job filters, queue counts and
//! settings, periodic jobs, nodes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use uuid::Uuid;

use crate::{time_str, uuid_str};

/// Which jobs `list_jobs` returns. Every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobFilter {
    /// Only this queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// Only this state (`scheduled`, `available`, `running`, `completed`, `failed`,
    /// `cancelled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Only this kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Only this group (tenant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Only jobs whose metadata contains this map: every key given, with the value given
    /// (strings, numbers, booleans or null; `hopper_core::meta::validate_meta_filter`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<serde_json::Value>,
    /// Only jobs with ids below this one: the cursor of the next (older) page.
    #[serde(
        default,
        with = "uuid_str::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub before: Option<Uuid>,
    /// Only jobs created at or after this instant.
    #[serde(
        default,
        deserialize_with = "time_str::optional",
        skip_serializing_if = "Option::is_none"
    )]
    pub created_after: Option<DateTime<Utc>>,
    /// Only jobs created before this instant.
    #[serde(
        default,
        deserialize_with = "time_str::optional",
        skip_serializing_if = "Option::is_none"
    )]
    pub created_before: Option<DateTime<Utc>>,
    /// At most this many (default 20, at most 1,000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// Counts of one queue's jobs by state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueCounts {
    /// The queue.
    pub queue: String,
    /// Ready to run now.
    pub available: i64,
    /// Waiting for their time.
    pub scheduled: i64,
    /// Held by workers.
    pub running: i64,
    /// Finished successfully.
    pub completed: i64,
    /// Dead-lettered.
    pub failed: i64,
    /// Cancelled.
    pub cancelled: i64,
    /// Age of the oldest available job, in seconds (0 when none).
    pub oldest_available_secs: f64,
}

/// A rate limit: at most `jobs` started per `per_ms`, `burst` at once after a quiet spell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateInfo {
    /// Jobs per interval.
    pub jobs: u32,
    /// The interval, in milliseconds.
    pub per_ms: u64,
    /// Most started at once after a quiet spell (absent: a tenth of `jobs`, at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
}

/// One queue's settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueInfo {
    /// The queue.
    pub queue: String,
    /// No job is claimed while paused.
    pub paused: bool,
    /// Groups of the queue take turns.
    pub grouped: bool,
    /// Most jobs running at once, across every worker.
    #[serde(default)]
    pub max_running: Option<u32>,
    /// Most jobs of one group running at once.
    #[serde(default)]
    pub max_running_per_group: Option<u32>,
    /// The rate limit.
    #[serde(default)]
    pub rate: Option<RateInfo>,
}

/// A change to a queue's settings: an absent field is left as it is; a limit given as
/// `null` is removed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueChange {
    /// The queue.
    pub queue: String,
    /// Pause (true) or resume (false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// Set, or remove (`null`), the global concurrency limit.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_running: Option<Option<u32>>,
    /// Set, or remove (`null`), the per-group concurrency limit.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_running_per_group: Option<Option<u32>>,
    /// Set, or remove (`null`), the rate limit.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub rate: Option<Option<RateInfo>>,
}

/// A field that is present: `null` becomes `Some(None)`; an absent one takes the default
/// (`None`).
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// A registered periodic job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CronInfo {
    /// Its unique name.
    pub name: String,
    /// The cron expression.
    pub schedule: String,
    /// The IANA time zone it is read in.
    pub timezone: String,
    /// The queue of the jobs it enqueues.
    pub queue: String,
    /// Their kind.
    pub kind: String,
    /// Their arguments.
    pub args: serde_json::Value,
    /// Their priority.
    pub priority: i16,
    /// Their attempts.
    pub max_attempts: i32,
    /// Their timeout, in milliseconds.
    pub timeout_ms: i32,
    /// Every missed tick is enqueued (true) or only the latest (false).
    pub catch_up: bool,
    /// The next tick.
    pub next_run_at: DateTime<Utc>,
    /// The last tick enqueued.
    #[serde(default)]
    pub last_run_at: Option<DateTime<Utc>>,
    /// The job of the last tick.
    #[serde(default, with = "uuid_str::option")]
    pub last_job_id: Option<Uuid>,
}

/// A registered node (a runtime or a `hopper serve`) as its last heartbeat left it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Its unique id.
    #[serde(with = "uuid_str")]
    pub id: Uuid,
    /// Its name (host and pid by default).
    pub name: String,
    /// The queues it serves.
    pub queues: Vec<String>,
    /// Its concurrency (for a server, its connected workers' together).
    pub concurrency: i32,
    /// When it registered.
    pub started_at: DateTime<Utc>,
    /// When its last heartbeat was written.
    pub heartbeat_at: DateTime<Utc>,
}
