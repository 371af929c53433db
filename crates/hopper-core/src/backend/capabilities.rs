//! The optional parts of the seam, each a trait a backend offers through an accessor of
//! [`Backend`] (see the module docs of [`crate::backend`]).

use async_trait::async_trait;

use super::params::{
    JobAttemptsOfNodeParams, JobLeasesOfNodeParams, JobPromoteOutcome, JobPruneOutcome,
    JobPruneParams, JobStatsParams, JobVacuumParams, MinuteStats, NodeReleaseDeadParams,
};
use crate::error::Result;
use crate::job::NewJob;
use crate::lease::Lease;
use crate::node_list::{NodeListParams, NodePage};
use crate::scheduling::{CronAdvance, CronEntry, InsertOutcome};

#[cfg(doc)]
use super::Backend;

/// The leader's work on the job table ([`Backend::maintenance`]): run by the runtime's
/// and the server's maintenance loops, one node at a time where it says so.
#[async_trait]
pub trait MaintenanceStore: Send + Sync {
    /// Makes scheduled jobs whose time has come available, and says when the next one is
    /// due.
    async fn job_promote_scheduled(&self) -> Result<JobPromoteOutcome>;

    /// Takes back jobs whose lease expired (a failed attempt each). Returns how many.
    async fn job_rescue_expired(&self) -> Result<u64>;

    /// Releases every job held by nodes silent for longer than `params.dead_after` (a
    /// failed attempt each) and forgets those nodes. Returns how many jobs. A job whose row
    /// another transaction holds may be skipped rather than waited for (every node runs
    /// this check); its node is then kept, so that the next call releases it once free: a
    /// node is forgotten only with its last running job, or a job whose lease was extended
    /// far would stay running under a node nobody looks at.
    async fn node_release_dead(&self, params: &NodeReleaseDeadParams) -> Result<u64>;

    /// Of `params.leases`, those running under `params.node`, in any order. Each lease is
    /// the attempt of one claim, made by one node, so a lease found is that node's until
    /// its attempt ends. For a server taking reports of leases none of its peers holds (a
    /// restart's): only its own node's are its to finish or extend.
    async fn job_leases_of_node(&self, params: &JobLeasesOfNodeParams) -> Result<Vec<Lease>>;

    /// Of `params.leases`, those that are their job's latest attempt and were made under
    /// `params.node`, whatever the job's state now (running, finished, waiting for a retry),
    /// in any order. An attempt's number never comes back once the job is claimed again,
    /// so a lease found is one the node's worker ran, and no other attempt of the job has
    /// started since. For a server taking the `log` lines of attempts none of its peers
    /// holds (sent after the outcome, resent after a reconnect or a restart): a worker may
    /// add lines to the latest attempt of a job that ran under its server's node, never to
    /// another node's job. Outcomes and extensions ask
    /// [`MaintenanceStore::job_leases_of_node`] (running only).
    ///
    /// The default answers as [`MaintenanceStore::job_leases_of_node`] does: the attempts
    /// still running, a narrower answer that refuses lines after the outcome.
    async fn job_attempts_of_node(&self, params: &JobAttemptsOfNodeParams) -> Result<Vec<Lease>> {
        let running = JobLeasesOfNodeParams {
            node: params.node,
            leases: params.leases.clone(),
        };
        self.job_leases_of_node(&running).await
    }

    /// Retention: deletes up to `params.limit` finished jobs older than their state's
    /// retention (by `finished_at` and the backend's "now"), oldest first, in one
    /// statement. Only one node prunes at a time: a call made while another node's is
    /// running returns at once with `elected: false`. Running and waiting jobs are never
    /// touched. Callers repeat while a call deletes a full batch.
    async fn job_prune(&self, params: &JobPruneParams) -> Result<JobPruneOutcome>;

    /// Reclaims the dead row versions of the job table when enough have piled up (more
    /// than 1,000 plus a tenth of the live rows) and no vacuum ran in the last
    /// `params.min_interval`, and refreshes the planner's statistics. One node at a time.
    /// True when it vacuumed. Every claim and outcome leaves a dead row version behind in
    /// a database with multi-version rows; left to pile up they slow every claim
    /// (docs/benchmarks.md, the soak). A storage without them answers false.
    async fn job_vacuum(&self, params: &JobVacuumParams) -> Result<bool>;
}

/// Unique and grouped inserts, and periodic jobs' writes ([`Backend::scheduling`]):
/// docs/scheduling.md.
#[async_trait]
pub trait SchedulingStore: Send + Sync {
    /// Inserts jobs in one transaction honouring their group and unique keys, and says
    /// what became of each (one outcome per job, in order). A job whose key is taken under
    /// [`crate::UniquePolicy::Reject`] fails the whole call with [`crate::Error::Conflict`].
    async fn job_upsert_many(&self, jobs: &[NewJob]) -> Result<Vec<InsertOutcome>>;

    /// Registers (or updates) periodic jobs. An entry whose schedule or time zone changed
    /// takes the given `next_run_at`; an unchanged one keeps the stored one.
    async fn cron_register(&self, entries: &[CronEntry]) -> Result<()>;

    /// Enqueues a periodic job's due ticks and moves its `next_run_at`, in one transaction,
    /// if its stored `next_run_at` is still the expected one. Returns false (and writes
    /// nothing) when another node got there first.
    async fn cron_advance(&self, advance: &CronAdvance) -> Result<bool>;
}

/// Per-minute statistics for the dashboard ([`Backend::stats`]).
#[async_trait]
pub trait StatsStore: Send + Sync {
    /// What finished in each minute of the last `params.window`, oldest first. Minutes in
    /// which nothing finished are left out.
    async fn job_stats_per_minute(&self, params: &JobStatsParams) -> Result<Vec<MinuteStats>>;

    /// One page of the registered nodes (runtimes and servers, alive or not yet released),
    /// in the listing's order: a backend that reads them gives them all to
    /// [`crate::node_list::page`], which cuts the page; the remote transport asks its
    /// server for the page. A `limit` of 0 is [`crate::Error::InvalidInput`].
    async fn node_list(&self, params: &NodeListParams) -> Result<NodePage>;
}
