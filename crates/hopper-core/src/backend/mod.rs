//! The storage seam: the traits between hopper's runtime and a storage backend.
//!
//! **For backend authors, and outside semver.** Users of hopper never need these traits:
//! the `hopper` crate's client, runtime and server call them. A minor release may add,
//! change or remove a method here as the runtime needs; an implementation outside this
//! repository follows hopper's releases and runs the conformance suite
//! (`hopper-conformance`) to know it still behaves as the runtime expects.
//!
//! The shape:
//!
//! - [`Backend`]: what every backend does (insert, claim, finish, extend, read, retry,
//!   cancel, delete, nodes, queue settings, wake-ups). The runtime's hot path calls only
//!   these.
//! - Capabilities, each a trait a backend offers through an accessor that answers `None`
//!   by default, so what a backend cannot do is said by its type, not by an error at run
//!   time:
//!   - [`MaintenanceStore`] ([`Backend::maintenance`]): the leader's work on the job table
//!     (promote scheduled jobs, rescue expired leases, release dead nodes' jobs, prune,
//!     vacuum). A backend that is a database offers it; the remote transport does not (its
//!     server does this work).
//!   - [`SchedulingStore`] ([`Backend::scheduling`]): unique and grouped inserts, and the
//!     writes of periodic jobs.
//!   - [`StatsStore`] ([`Backend::stats`]): per-minute throughput and latency, and the
//!     registered nodes a page at a time.
//!   - [`NodeLiveness`] ([`Backend::node_liveness`]): a node's death seen by the storage
//!     itself (a session lock), at once instead of after silent heartbeats.
//!
//! Methods are named entity first (`job_claim`, `node_heartbeat`, `queue_stats`). Each
//! takes one params struct (or a slice of the entities it writes) and answers one result
//! type, so a new option is a new field, not a new signature. The rules shared by every
//! backend (the rate bucket, keys of periodic ticks, conflict messages, name checks) live
//! in this crate ([`crate::policy`], [`crate::job`]); a backend only stores. "Now" comes
//! from the backend's [`crate::Clock`], never from the caller, so tests move time by hand.

mod capabilities;
mod params;

use async_trait::async_trait;

pub use crate::node_list::{NodeListParams, NodePage};
pub use capabilities::{MaintenanceStore, SchedulingStore, StatsStore};
pub use params::{
    AppliedMigration, ClaimParams, ClaimedJob, Finish, FinishResult, JobAttemptsOfNodeParams,
    JobCancelParams, JobClearParams, JobDeleteParams, JobExtendManyParams, JobGetParams,
    JobLeasesOfNodeParams, JobListParams, JobPromoteOutcome, JobPruneOutcome, JobPruneParams,
    JobRetryManyParams, JobRetryParams, JobSearchParams, JobStatsParams, JobVacuumParams,
    MinuteStats, NodeDeregisterParams, NodeInfo, NodeRecord, NodeReleaseDeadParams, Outcome,
    QueueStats, Wakeup, WakeupStream,
};

use crate::error::Result;
use crate::job::{JobRecord, NewJob};
use crate::job_log::LogStore;
use crate::lease::Lease;
use crate::liveness::NodeLiveness;
use crate::scheduling::{CronEntry, QueueSettings, QueueUpdate};

/// A storage backend: what every backend does. See the module docs.
#[async_trait]
pub trait Backend: Send + Sync + std::fmt::Debug + 'static {
    /// A short name (`postgres`, `sqlite`, `remote`).
    fn name(&self) -> &'static str;

    /// For backend-specific features (completing a job inside the caller's transaction).
    fn as_any(&self) -> &dyn std::any::Any;

    /// Applies every pending migration and returns those it applied, oldest first (none
    /// when the schema was up to date). Safe to run twice and from two processes at once.
    async fn migrate(&self) -> Result<Vec<AppliedMigration>>;

    /// Refuses, changing nothing, a schema this build cannot work on: one migrated by a
    /// newer hopper ([`crate::policy::refuse_newer_schema`], the check [`Backend::migrate`]
    /// makes first) or one never migrated. For the processes that run jobs without
    /// migrating. A backend that keeps no schema of its own (the remote one, whose server
    /// checks its database when it starts) has nothing to check.
    async fn schema_check(&self) -> Result<()> {
        Ok(())
    }

    /// Inserts one job.
    async fn job_insert(&self, job: &NewJob) -> Result<()>;

    /// Inserts many jobs in one transaction (all or nothing).
    async fn job_insert_many(&self, jobs: &[NewJob]) -> Result<()>;

    /// Reads one job (`None` when there is no such job).
    async fn job_get(&self, params: &JobGetParams) -> Result<Option<JobRecord>>;

    /// Lists jobs, newest first. An `args` or `meta` larger than
    /// [`crate::LISTED_VALUE_BYTES`] is left out, its size said instead
    /// ([`JobRecord::args_bytes`], [`JobRecord::meta_bytes`]), decided in the query so
    /// that it is never read.
    async fn job_list(&self, params: &JobListParams) -> Result<Vec<JobRecord>>;

    /// Lists jobs like [`Backend::job_list`], also filtered by creation time.
    async fn job_search(&self, params: &JobSearchParams) -> Result<Vec<JobRecord>>;

    /// Claims up to `limit` available jobs of one queue, highest priority first, FIFO within
    /// a priority. Each claim is a new attempt with a lease.
    async fn job_claim(&self, params: &ClaimParams) -> Result<Vec<ClaimedJob>>;

    /// Records many outcomes at once. The answer has one entry per input, in order.
    async fn job_finish_many(&self, finishes: &[Finish]) -> Result<Vec<FinishResult>>;

    /// Extends the given leases to `by` from now, leaving any that already ends later (a
    /// heartbeat never shortens a handler's longer extend). Returns the leases that were
    /// lost.
    async fn job_extend_many(&self, params: &JobExtendManyParams) -> Result<Vec<Lease>>;

    /// Puts a failed or cancelled job back to `available` with a fresh set of attempts.
    /// [`crate::Error::NotFound`] if there is no such job, [`crate::Error::Conflict`] in
    /// another state ([`crate::policy::conflict`]).
    async fn job_retry(&self, params: &JobRetryParams) -> Result<JobRecord>;

    /// Puts every `failed` job matching `params` back to `available` with a fresh set of
    /// attempts, as [`Backend::job_retry`] does for one. Returns how many. A job whose
    /// unique key a waiting or running job holds stays failed (its own retry would be a
    /// conflict), and of several failed jobs of one key only the latest is retried: one
    /// such job never refuses the others.
    async fn job_retry_many(&self, params: &JobRetryManyParams) -> Result<u64>;

    /// Cancels a job that has not finished. A running job's lease is revoked at once and its
    /// node is told (a [`Wakeup::Cancelled`]). [`crate::Error::Conflict`] once finished.
    async fn job_cancel(&self, params: &JobCancelParams) -> Result<JobRecord>;

    /// Deletes one job that is not running. [`crate::Error::NotFound`] if there is no such
    /// job, [`crate::Error::Conflict`] if it is running (cancel it first).
    async fn job_delete(&self, params: &JobDeleteParams) -> Result<()>;

    /// Deletes every job of a queue (or of every queue) that is not running. Returns how
    /// many.
    async fn job_clear(&self, params: &JobClearParams) -> Result<u64>;

    /// Registers or refreshes a node.
    async fn node_heartbeat(&self, node: &NodeInfo) -> Result<()>;

    /// Forgets a node that stops, once its last outcome was written (or given up on).
    /// Whatever still runs under it (a handler that did not stop by the shutdown deadline,
    /// an outcome that could not be written) is released as a dead node's jobs are
    /// ([`MaintenanceStore::node_release_dead`]): back to its queue, a failed attempt. A
    /// node is forgotten only with its last running job: where a job's row is held by
    /// another transaction, that job is skipped and the node stays registered, and the
    /// release of dead nodes takes both once the row is free. A backend whose jobs run
    /// under another node (the remote transport's run under the server's) tells that node
    /// instead.
    async fn node_deregister(&self, params: &NodeDeregisterParams) -> Result<()>;

    /// Counts by queue and state.
    async fn queue_stats(&self) -> Result<Vec<QueueStats>>;

    /// Every queue that has settings, by name.
    async fn queue_list(&self) -> Result<Vec<QueueSettings>>;

    /// Changes one queue's settings (pause, resume, limits) and tells every node. Returns
    /// the settings now stored.
    async fn queue_update(&self, update: &QueueUpdate) -> Result<QueueSettings>;

    /// Every registered periodic job, by name.
    async fn cron_list(&self) -> Result<Vec<CronEntry>>;

    /// A stream of wake-ups (new jobs, cancellations). Polling stays the fallback.
    async fn subscribe(&self) -> Result<WakeupStream>;

    /// The leader's work on the job table, if this backend does it here.
    fn maintenance(&self) -> Option<&dyn MaintenanceStore> {
        None
    }

    /// Unique and grouped inserts and periodic jobs' writes, if this backend offers them.
    fn scheduling(&self) -> Option<&dyn SchedulingStore> {
        None
    }

    /// Per-minute statistics, if this backend offers them.
    fn stats(&self) -> Option<&dyn StatsStore> {
        None
    }

    /// Node liveness tracked by the storage itself ([`NodeLiveness`]), if this backend can
    /// offer it here; without it, dead nodes are found by their silent heartbeats only.
    fn node_liveness(&self) -> Option<&dyn NodeLiveness> {
        None
    }

    /// Per-job logs ([`LogStore`]), if this backend keeps them; without it, what handlers
    /// log is dropped.
    fn logs(&self) -> Option<&dyn LogStore> {
        None
    }
}
