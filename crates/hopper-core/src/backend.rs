//! The storage seam: the one trait between hopper's runtime and a storage backend.
//!
//! This is an internal seam, kept small on purpose. Methods are named entity first
//! (`job_claim`, `node_heartbeat`, `queue_stats`) and take one params struct or a slice, so
//! a new option is a new field, not a new signature. Every backend passes the same
//! conformance suite. "Now" comes from the backend's [`crate::Clock`], never from the
//! caller, so tests move time by hand.

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures_util::Stream;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::job::{JobId, JobRecord, JobState, NewJob, Priority};
use crate::lease::{Lease, NodeId};
use crate::scheduling::{CronAdvance, CronEntry, InsertOutcome, QueueSettings, QueueUpdate};

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

/// Parameters of [`Backend::job_prune`]: how long finished jobs are kept.
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
}

/// What one [`Backend::job_prune`] call deleted (or, in a dry run, would delete).
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
}

impl JobPruneOutcome {
    /// Jobs in every state.
    pub fn total(&self) -> u64 {
        self.completed + self.cancelled + self.failed
    }
}

/// Parameters of [`Backend::job_stats_per_minute`].
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

/// A stream of [`Wakeup`]s.
pub type WakeupStream = Pin<Box<dyn Stream<Item = Wakeup> + Send>>;

/// A storage backend. See the module docs.
#[async_trait]
pub trait Backend: Send + Sync + std::fmt::Debug + 'static {
    /// A short name (`postgres`, `sqlite`).
    fn name(&self) -> &'static str;

    /// For backend-specific features (completing a job inside the caller's transaction).
    fn as_any(&self) -> &dyn std::any::Any;

    /// Applies every pending migration. Safe to run twice and from two processes at once.
    async fn migrate(&self) -> Result<()>;

    /// Inserts one job.
    async fn job_insert(&self, job: &NewJob) -> Result<()>;

    /// Inserts many jobs in one transaction (all or nothing).
    async fn job_insert_many(&self, jobs: &[NewJob]) -> Result<()>;

    /// Reads one job.
    async fn job_get(&self, id: JobId) -> Result<Option<JobRecord>>;

    /// Lists jobs, newest first.
    async fn job_list(&self, params: &JobListParams) -> Result<Vec<JobRecord>>;

    /// Claims up to `limit` available jobs of one queue, highest priority first, FIFO within
    /// a priority. Each claim is a new attempt with a lease.
    async fn job_claim(&self, params: &ClaimParams) -> Result<Vec<ClaimedJob>>;

    /// As [`Backend::job_claim`], but only jobs of `kinds`: jobs of other kinds are left as
    /// they are (not claimed, their `run_at` unmoved). For a claimer that knows which kinds
    /// it can run (`hopper serve`, when every worker with room declared its kinds). The
    /// default claims every kind, as `job_claim` does; the claimer then puts back what it
    /// cannot run.
    async fn job_claim_kinds(
        &self,
        params: &ClaimParams,
        kinds: &[String],
    ) -> Result<Vec<ClaimedJob>> {
        let _ = kinds;
        self.job_claim(params).await
    }

    /// Records many outcomes at once. The answer has one entry per input, in order.
    async fn job_finish_many(&self, finishes: &[Finish]) -> Result<Vec<FinishResult>>;

    /// Extends the given leases to `by` from now. Returns the leases that were lost.
    async fn job_extend_many(&self, leases: &[Lease], by: Duration) -> Result<Vec<Lease>>;

    /// Puts a failed or cancelled job back to `available` with a fresh set of attempts.
    async fn job_retry(&self, id: JobId) -> Result<JobRecord>;

    /// Cancels a job that has not finished. A running job's lease is revoked at once and its
    /// node is told (a [`Wakeup::Cancelled`]).
    async fn job_cancel(&self, id: JobId) -> Result<JobRecord>;

    /// Deletes every job of `queue` that is not running (or of every queue). Returns how many.
    async fn job_clear(&self, queue: Option<&str>) -> Result<u64>;

    /// Makes scheduled jobs whose time has come available. Returns how many, and when the
    /// next scheduled job is due (if any).
    async fn job_promote_scheduled(&self) -> Result<(u64, Option<DateTime<Utc>>)>;

    /// Takes back jobs whose lease expired (a failed attempt each). Returns how many.
    async fn job_rescue_expired(&self) -> Result<u64>;

    /// Registers or refreshes a node.
    async fn node_heartbeat(&self, node: &NodeInfo) -> Result<()>;

    /// Releases every job held by nodes silent for longer than `dead_after` (a failed
    /// attempt each) and forgets those nodes. Returns how many jobs.
    async fn node_release_dead(&self, dead_after: Duration) -> Result<u64>;

    /// Forgets a node that shut down cleanly.
    async fn node_deregister(&self, node: NodeId) -> Result<()>;

    /// Counts by queue and state.
    async fn queue_stats(&self) -> Result<Vec<QueueStats>>;

    /// A stream of wake-ups (new jobs, cancellations). Polling stays the fallback.
    async fn subscribe(&self) -> Result<WakeupStream>;

    // The methods below were added for the HTTP API and dashboard. Each has a default
    // body so a backend that does not offer it yet still compiles, and says so plainly
    // (`Error::Unsupported`) instead of doing something silently wrong.

    /// Lists jobs like [`Backend::job_list`], also filtered by creation time.
    ///
    /// The default body serves searches without a time range through
    /// [`Backend::job_list`] and refuses the others.
    async fn job_search(&self, params: &JobSearchParams) -> Result<Vec<JobRecord>> {
        if params.created_after.is_none() && params.created_before.is_none() {
            return self.job_list(&params.list).await;
        }
        Err(Error::Unsupported(format!(
            "filtering jobs by creation time ({} backend)",
            self.name()
        )))
    }

    /// Deletes one job that is not running. [`Error::NotFound`] if there is no such job,
    /// [`Error::Conflict`] if it is running (cancel it first).
    async fn job_delete(&self, id: JobId) -> Result<()> {
        let _ = id;
        Err(Error::Unsupported(format!(
            "deleting a job ({} backend)",
            self.name()
        )))
    }

    /// Puts every `failed` job matching `params` back to `available` with a fresh set of
    /// attempts, as [`Backend::job_retry`] does for one. Returns how many.
    async fn job_retry_many(&self, params: &JobRetryManyParams) -> Result<u64> {
        let _ = params;
        Err(Error::Unsupported(format!(
            "retrying failed jobs in bulk ({} backend)",
            self.name()
        )))
    }

    /// What finished in each minute of the last `params.window`, oldest first. Minutes in
    /// which nothing finished are left out.
    async fn job_stats_per_minute(&self, params: &JobStatsParams) -> Result<Vec<MinuteStats>> {
        let _ = params;
        Err(Error::Unsupported(format!(
            "per-minute job statistics ({} backend)",
            self.name()
        )))
    }

    // Scheduling and control (docs/scheduling.md). Default bodies refuse plainly, so a
    // backend without these features still compiles and says what it cannot do.

    /// Inserts jobs in one transaction honouring their group and unique keys, and says
    /// what became of each (one outcome per job, in order). A job whose key is taken under
    /// [`crate::UniquePolicy::Reject`] fails the whole call with [`Error::Conflict`].
    ///
    /// The default body inserts jobs that use neither through [`Backend::job_insert_many`]
    /// and refuses the others.
    async fn job_upsert_many(&self, jobs: &[NewJob]) -> Result<Vec<InsertOutcome>> {
        if jobs.iter().any(NewJob::needs_upsert) {
            return Err(Error::Unsupported(format!(
                "group keys and unique keys ({} backend)",
                self.name()
            )));
        }
        self.job_insert_many(jobs).await?;
        Ok(vec![InsertOutcome::Inserted; jobs.len()])
    }

    /// Every queue that has settings, by name.
    async fn queue_list(&self) -> Result<Vec<QueueSettings>> {
        Err(Error::Unsupported(format!(
            "queue settings ({} backend)",
            self.name()
        )))
    }

    /// Changes one queue's settings (pause, resume, limits) and tells every node. Returns
    /// the settings now stored.
    async fn queue_update(&self, update: &QueueUpdate) -> Result<QueueSettings> {
        let _ = update;
        Err(Error::Unsupported(format!(
            "pausing queues and global limits ({} backend)",
            self.name()
        )))
    }

    /// Registers (or updates) periodic jobs. An entry whose schedule or time zone changed
    /// takes the given `next_run_at`; an unchanged one keeps the stored one.
    async fn cron_register(&self, entries: &[CronEntry]) -> Result<()> {
        let _ = entries;
        Err(Error::Unsupported(format!(
            "periodic jobs ({} backend)",
            self.name()
        )))
    }

    /// Every registered periodic job, by name.
    async fn cron_list(&self) -> Result<Vec<CronEntry>> {
        Err(Error::Unsupported(format!(
            "periodic jobs ({} backend)",
            self.name()
        )))
    }

    /// Enqueues a periodic job's due ticks and moves its `next_run_at`, in one transaction,
    /// if its stored `next_run_at` is still the expected one. Returns false (and writes
    /// nothing) when another node got there first.
    async fn cron_advance(&self, advance: &CronAdvance) -> Result<bool> {
        let _ = advance;
        Err(Error::Unsupported(format!(
            "periodic jobs ({} backend)",
            self.name()
        )))
    }

    /// Reclaims the dead row versions of the job table when enough have piled up (more
    /// than 1,000 plus a tenth of the live rows) and no vacuum ran in the last
    /// `min_interval`, and refreshes the planner's statistics. One node at a time. True
    /// when it vacuumed. Every claim and outcome leaves a dead row version behind; where
    /// the database's own autovacuum is off or falls behind, they would fill the claim
    /// index and slow every claim (measured in docs/benchmarks.md, the soak).
    async fn job_vacuum(&self, min_interval: Duration) -> Result<bool> {
        let _ = min_interval;
        Err(Error::Unsupported(format!(
            "vacuuming the job table ({} backend)",
            self.name()
        )))
    }

    /// Retention: deletes up to `params.limit` finished jobs older than their state's
    /// retention (by `finished_at` and the backend's "now"), oldest first, in one
    /// statement. Only one node prunes at a time: a call made while another node's is
    /// running returns at once with `elected: false`. Running and waiting jobs are never
    /// touched. Callers repeat while a call deletes a full batch.
    async fn job_prune(&self, params: &JobPruneParams) -> Result<JobPruneOutcome> {
        let _ = params;
        Err(Error::Unsupported(format!(
            "pruning finished jobs ({} backend)",
            self.name()
        )))
    }
}
