//! The params and results of the seam's methods: one params struct per method, so a new
//! option is a new field, not a new signature; one result type per method, never a tuple.

use std::pin::Pin;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::Stream;
use serde::{Deserialize, Serialize};

use crate::job::{JobId, JobState, Priority};
use crate::lease::{Lease, NodeId};

#[cfg(doc)]
use super::{Backend, MaintenanceStore, StatsStore};

/// Parameters of [`Backend::job_claim`].
#[derive(Debug, Clone)]
pub struct ClaimParams {
    /// The queue to claim from.
    pub queue: String,
    /// The claiming node; recorded on each job so its death releases them.
    pub node: NodeId,
    /// At most this many jobs.
    pub limit: u32,
    /// The lease granted: `min(job timeout, lease)` from now. Heartbeats extend it.
    pub lease: Duration,
    /// Only jobs of these kinds, when the claimer knows what it can run (`hopper serve`,
    /// when every worker with room declared its kinds); every kind when `None`. Both
    /// backends apply it in every kind of queue (plain, limited, fair): jobs of other kinds
    /// are not claimed and their `run_at` is not moved. A backend outside this repository
    /// may not apply it; the claimer hands back ([`Outcome::Released`]) what it cannot run.
    pub kinds: Option<Vec<String>>,
}

/// A job handed to a worker, with the lease that lets it report the outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClaimedJob {
    /// Proof of ownership of this attempt.
    pub lease: Lease,
    /// Its queue.
    pub queue: String,
    /// Its kind.
    pub kind: String,
    /// Its arguments.
    pub args: serde_json::Value,
    /// Its priority.
    pub priority: Priority,
    /// Which counted attempt this is (1 for the first; snoozes and releases do not count).
    pub counted_attempt: i32,
    /// Attempts before it is dead-lettered.
    pub max_attempts: i32,
    /// How long this run may take.
    pub timeout: Duration,
    /// When the job was inserted.
    pub created_at: DateTime<Utc>,
    /// When it was due.
    pub run_at: DateTime<Utc>,
    /// Its metadata (a JSON object; `{}` when it has none), with the trace context of the
    /// span that enqueued it, if any.
    #[serde(default = "crate::meta::empty")]
    pub meta: serde_json::Value,
}

/// What became of one attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Outcome {
    /// The handler succeeded.
    Completed {
        /// How long the run took.
        duration_ms: i64,
    },
    /// The handler failed; the job is tried again after `retry_in`, unless this was its last
    /// attempt, in which case it is dead-lettered (`failed`).
    Retry {
        /// Why.
        error: String,
        /// Delay before the next attempt.
        retry_in: Duration,
        /// How long the run took.
        duration_ms: i64,
    },
    /// The handler failed and must not be retried: the job is dead-lettered now.
    Failed {
        /// Why.
        error: String,
        /// How long the run took.
        duration_ms: i64,
    },
    /// Run again after `retry_in` without using up an attempt.
    Snoozed {
        /// Delay before the next attempt.
        retry_in: Duration,
    },
    /// Hand the job back untouched (graceful shutdown): available again at once, the attempt
    /// not counted.
    Released,
}

/// One attempt's outcome, with the lease that proves the reporter owns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finish {
    /// The attempt.
    pub lease: Lease,
    /// What became of it.
    pub outcome: Outcome,
}

impl Finish {
    /// Hands the attempt of `lease` back unstarted ([`Outcome::Released`]).
    pub fn released(lease: Lease) -> Self {
        Finish {
            lease,
            outcome: Outcome::Released,
        }
    }
}

/// The answer to one [`Finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishResult {
    /// Recorded; the job is now in this state.
    Recorded(JobState),
    /// The lease was no longer current; nothing was changed.
    LeaseLost,
    /// Not written: another transaction holds the job's row (an open `SELECT … FOR
    /// UPDATE`, an admin's change left uncommitted), and the backend does not wait for it.
    /// Nothing was changed and the lease stands: write the same outcome again later.
    Held,
}

/// Parameters of [`Backend::job_list`].
#[derive(Debug, Clone, Default)]
pub struct JobListParams {
    /// Only this queue.
    pub queue: Option<String>,
    /// Only this state. (`scheduled` jobs are listed under their stored state.)
    pub state: Option<JobState>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this group (tenant).
    pub group: Option<String>,
    /// Only jobs whose metadata contains this object: every key given, with the value
    /// given (strings, numbers, booleans or null; see
    /// [`crate::meta::validate_meta_filter`]).
    pub meta: Option<serde_json::Value>,
    /// Only jobs with ids below this one (cursor for newest-first pages).
    pub before: Option<JobId>,
    /// At most this many (newest first).
    pub limit: u32,
}

/// Parameters of [`Backend::job_search`]: the filters of [`JobListParams`] plus a range of
/// creation times.
#[derive(Debug, Clone, Default)]
pub struct JobSearchParams {
    /// Queue, state, kind, cursor and limit, as for [`Backend::job_list`].
    pub list: JobListParams,
    /// Only jobs created at or after this instant.
    pub created_after: Option<DateTime<Utc>>,
    /// Only jobs created before this instant.
    pub created_before: Option<DateTime<Utc>>,
}

/// Parameters of [`Backend::job_retry_many`]: which failed jobs to retry.
#[derive(Debug, Clone, Default)]
pub struct JobRetryManyParams {
    /// Only this queue (every queue when `None`).
    pub queue: Option<String>,
    /// Only this kind (every kind when `None`).
    pub kind: Option<String>,
}

/// Parameters of [`MaintenanceStore::job_prune`]: how long finished jobs are kept.
#[derive(Debug, Clone)]
pub struct JobPruneParams {
    /// `completed` and `cancelled` jobs that finished longer ago than this are deleted.
    pub completed_retention: Duration,
    /// `failed` (dead-lettered) jobs that finished longer ago than this are deleted.
    pub failed_retention: Duration,
    /// Most jobs deleted by one call (one statement). Ignored by a dry run.
    pub limit: u32,
    /// Count what would be deleted (every such job, not one batch) and delete nothing.
    pub dry_run: bool,
    /// Only jobs with an id above this one: the [`JobPruneOutcome::last_id`] of the previous
    /// batch of the same pass, so that a batch reads on from where the last one stopped
    /// instead of reading again the old jobs the earlier batches kept (failed jobs within
    /// their longer retention, scheduled or running ones, finished ones whose unique window
    /// has not passed). `None` starts a pass at the oldest job; the kept jobs are read once
    /// by each pass, not once by each batch. Ignored by a dry run.
    pub after: Option<JobId>,
}

/// What one [`MaintenanceStore::job_prune`] call deleted (or, in a dry run, would delete).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobPruneOutcome {
    /// False when another node was pruning at that moment: nothing was done, and a full
    /// batch is not to be expected from this node now.
    pub elected: bool,
    /// `completed` jobs.
    pub completed: u64,
    /// `cancelled` jobs.
    pub cancelled: u64,
    /// `failed` jobs.
    pub failed: u64,
    /// The greatest id this call deleted, for the next batch's [`JobPruneParams::after`];
    /// `None` when it deleted nothing (and in a dry run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_id: Option<JobId>,
}

impl JobPruneOutcome {
    /// Jobs in every state.
    pub fn total(&self) -> u64 {
        self.completed + self.cancelled + self.failed
    }
}

/// Parameters of [`StatsStore::job_stats_per_minute`].
#[derive(Debug, Clone)]
pub struct JobStatsParams {
    /// How far back from the backend's "now" to look (one hour on the dashboard).
    pub window: Duration,
}

/// What finished in one minute, across every queue: the raw material of throughput and
/// latency charts. Computed from the jobs table (`finished_at`, `attempted_at`, `run_at`,
/// `duration_ms`), so it covers every worker, whatever process ran it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MinuteStats {
    /// The start of the minute (UTC, seconds zero).
    pub minute: DateTime<Utc>,
    /// Jobs completed in this minute.
    pub completed: i64,
    /// Jobs dead-lettered (`failed`) in this minute.
    pub failed: i64,
    /// Mean wait from due (`run_at`) to the start of the last attempt (`attempted_at`), in
    /// milliseconds, over the jobs finished in this minute.
    pub latency_avg_ms: f64,
    /// The 95th percentile of that wait, in milliseconds.
    pub latency_p95_ms: f64,
    /// Mean run time of the jobs completed in this minute, in milliseconds.
    pub duration_avg_ms: f64,
    /// The 95th percentile of that run time, in milliseconds.
    pub duration_p95_ms: f64,
}

/// Counts of one queue's jobs by state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueueStats {
    /// The queue.
    pub queue: String,
    /// Ready to run now.
    pub available: i64,
    /// Waiting for their `run_at` (new, or retrying after a backoff).
    pub scheduled: i64,
    /// Held by a worker.
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

impl QueueStats {
    /// The count of each state, named as the `hopper_jobs` gauge labels them.
    pub fn by_state(&self) -> [(&'static str, i64); 6] {
        [
            ("scheduled", self.scheduled),
            ("available", self.available),
            ("running", self.running),
            ("completed", self.completed),
            ("failed", self.failed),
            ("cancelled", self.cancelled),
        ]
    }
}

/// A worker process, as registered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Its unique id.
    pub id: NodeId,
    /// A human name (host and pid by default).
    pub name: String,
    /// The queues it serves.
    pub queues: Vec<String>,
    /// Its concurrency.
    pub concurrency: i32,
}

/// A registered node (a runtime or a `hopper serve`), as its last heartbeat left it: what
/// an operator lists to see which workers are alive ([`crate::backend::StatsStore::node_list`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// What it registered (and last wrote in a heartbeat): id, name, queues, concurrency
    /// (for `hopper serve`, its connected workers' together). Flattened in JSON.
    #[serde(flatten)]
    pub info: NodeInfo,
    /// When it registered.
    pub started_at: DateTime<Utc>,
    /// When its last heartbeat was written. A node silent past its `node_dead_after` is
    /// released by the others' rescuers and its row deleted.
    pub heartbeat_at: DateTime<Utc>,
}

/// A signal from the backend that something changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wakeup {
    /// Jobs became available in this queue.
    Jobs(String),
    /// This job was cancelled; a handler running it should stop.
    Cancelled(JobId),
    /// The notification channel was re-established; anything may have changed meanwhile.
    Resync,
}

/// A migration that [`Backend::migrate`] applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedMigration {
    /// Its number: migrations apply in this order.
    pub version: i64,
    /// What it does (`0001_jobs` has the name `jobs`).
    pub name: String,
}

/// A stream of [`Wakeup`]s.
pub type WakeupStream = Pin<Box<dyn Stream<Item = Wakeup> + Send>>;

/// Parameters of [`Backend::job_get`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobGetParams {
    /// The job.
    pub id: JobId,
}

/// Parameters of [`Backend::job_retry`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobRetryParams {
    /// The job: `failed` or `cancelled`.
    pub id: JobId,
}

/// Parameters of [`Backend::job_cancel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobCancelParams {
    /// The job: not finished.
    pub id: JobId,
}

/// Parameters of [`Backend::job_delete`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobDeleteParams {
    /// The job: not running.
    pub id: JobId,
}

/// Parameters of [`Backend::job_clear`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobClearParams {
    /// Only this queue (every queue when `None`).
    pub queue: Option<String>,
}

/// Parameters of [`Backend::job_extend_many`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobExtendManyParams {
    /// The leases to extend.
    pub leases: Vec<Lease>,
    /// Each lease then expires this long after the backend's "now", or later if it
    /// already did.
    pub by: Duration,
}

/// Parameters of [`MaintenanceStore::job_leases_of_node`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobLeasesOfNodeParams {
    /// The node.
    pub node: NodeId,
    /// The leases to look for.
    pub leases: Vec<Lease>,
}

/// Parameters of [`MaintenanceStore::job_attempts_of_node`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobAttemptsOfNodeParams {
    /// The node.
    pub node: NodeId,
    /// The attempts to look for.
    pub leases: Vec<Lease>,
}

/// Parameters of [`Backend::node_deregister`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeDeregisterParams {
    /// The node that stops.
    pub node: NodeId,
}

/// Parameters of [`MaintenanceStore::node_release_dead`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeReleaseDeadParams {
    /// A node silent for longer than this is dead.
    pub dead_after: Duration,
}

/// Parameters of [`MaintenanceStore::job_vacuum`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobVacuumParams {
    /// No vacuum if one ran more recently than this.
    pub min_interval: Duration,
}

/// What one [`MaintenanceStore::job_promote_scheduled`] call did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobPromoteOutcome {
    /// Scheduled jobs made available.
    pub promoted: u64,
    /// When the next scheduled job is due, if any is left.
    pub next_due: Option<DateTime<Utc>>,
}
