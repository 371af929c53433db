//! The storage conformance suite: what every hopper [`Backend`] must do, written once
//! against `Arc<dyn Backend>`, for the backends in hopper's repository and for any other.
//!
//! A backend runs the whole suite from one test file: an `async fn() -> anyhow::Result<Harness>`
//! that returns a fresh, migrated, isolated store whose "now" is the harness's
//! [`TestClock`], and [`conformance_suite!`] invoked with it. The test crate needs
//! `hopper-conformance` and `anyhow` as dev-dependencies; the macro brings its own tokio.
//!
//! ```ignore
//! async fn my_backend() -> anyhow::Result<hopper_conformance::Harness> {
//!     let clock = hopper_core::TestClock::new(hopper_conformance::t0());
//!     let backend = MyBackend::open_fresh(clock.clone()).await?;
//!     backend.migrate().await?;
//!     hopper_conformance::Harness::new(std::sync::Arc::new(backend), clock, ()).await
//! }
//!
//! hopper_conformance::conformance_suite!(my_backend);
//! ```
//!
//! Each case is an `async fn(&Harness)`; each gets its own store, so the cases run in
//! parallel. Time only moves when a case moves the clock: no case sleeps for a lease or a
//! schedule. The suite needs the leader's maintenance ([`MaintenanceStore`]): promotion and
//! rescue are part of a job's life. Cases of the other capabilities
//! ([`hopper_core::backend::SchedulingStore`], [`hopper_core::backend::StatsStore`],
//! [`hopper_core::NodeLiveness`]) pass without checking anything on a backend that does not
//! offer them.
//!
//! A backend whose rows another transaction can hold (an application's `SELECT … FOR
//! UPDATE`) gives the harness a way to hold one ([`Harness::with_job_holds`]), and the cases
//! of what hopper does around a held row hold one; without it they run unheld.
//!
//! The suite follows the seam, which is outside semver: use the version of this crate
//! that matches the `hopper-core` the backend implements.

/// The tokio the generated tests run on, so a backend's test crate needs no tokio of its
/// own for them.
#[doc(hidden)]
pub use tokio;

pub mod admin;
pub mod claim;
pub mod cron;
pub mod fairness;
pub mod finish;
pub mod input;
pub mod jobs;
pub mod kinds;
pub mod leases;
pub mod limits;
pub mod logs;
pub mod meta;
pub mod nodes;
pub mod operations;
pub mod retention;
pub mod scheduling;
pub mod unique;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use chrono::{DateTime, TimeZone, Utc};
use hopper_core::backend::{
    Backend, ClaimParams, ClaimedJob, Finish, FinishResult, JobGetParams, JobPromoteOutcome,
    MaintenanceStore, NodeInfo, Outcome, SchedulingStore, StatsStore,
};
use hopper_core::{JobId, JobRecord, Lease, NewJob, TestClock};
use serde_json::json;
use uuid::Uuid;

/// Where every harness clock starts: an explicit instant, far from the wall clock, so a
/// backend that reads its own clock instead of the harness's is caught.
pub fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2031, 3, 14, 9, 0, 0)
        .single()
        .expect("a valid instant")
}

/// The lease the cases claim with unless they say otherwise.
pub const LEASE: Duration = Duration::from_secs(30);

/// One isolated, migrated store, its backend, and the clock that backend reads.
pub struct Harness {
    /// The backend under test.
    pub backend: Arc<dyn Backend>,
    /// The backend's clock; starts at [`t0`].
    pub clock: TestClock,
    /// A node registered at [`t0`], used by [`Harness::claim`].
    pub node: NodeInfo,
    store: Box<dyn std::any::Any + Send + Sync>,
    hold_job: Option<HoldJob>,
}

/// How a backend's test file holds a job's row as an application's open transaction
/// would: given the harness (whose [`Harness::store`] reaches the database) and the job.
pub type HoldJob = for<'a> fn(
    &'a Harness,
    JobId,
)
    -> Pin<Box<dyn Future<Output = anyhow::Result<JobHold>> + Send + 'a>>;

/// A job's row held by another transaction ([`Harness::hold_job`]) until
/// [`JobHold::release`] ends that transaction. Dropped, it ends it too, but perhaps a
/// moment later (a database sees a connection close when it sees it).
pub struct JobHold {
    release: Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>,
}

impl JobHold {
    /// A hold that `release` ends (committing the holding transaction).
    pub fn new(release: impl Future<Output = anyhow::Result<()>> + Send + 'static) -> Self {
        JobHold {
            release: Box::pin(release),
        }
    }

    /// Ends the hold: the holding transaction commits.
    pub async fn release(self) -> anyhow::Result<()> {
        self.release.await
    }
}

impl Harness {
    /// Wraps a backend whose clock is `clock` (set to [`t0`] here). `store` is kept alive
    /// as long as the harness (for example the guard that drops a test schema).
    pub async fn new(
        backend: Arc<dyn Backend>,
        clock: TestClock,
        store: impl std::any::Any + Send + Sync,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(
            backend.maintenance().is_some(),
            "the conformance suite needs a backend that does its own maintenance ({} does not)",
            backend.name()
        );
        clock.set(t0());
        let node = node_info("conformance");
        backend.node_heartbeat(&node).await?;
        Ok(Harness {
            backend,
            clock,
            node,
            store: Box::new(store),
            hold_job: None,
        })
    }

    /// The harness, able to hold a job's row by `hold` ([`Harness::hold_job`]).
    pub fn with_job_holds(mut self, hold: HoldJob) -> Self {
        self.hold_job = Some(hold);
        self
    }

    /// Holds the row of job `id` in another transaction, as an application may, if the
    /// backend's test file said how ([`Harness::with_job_holds`]); `None` otherwise.
    pub async fn hold_job(&self, id: JobId) -> anyhow::Result<Option<JobHold>> {
        match self.hold_job {
            Some(hold) => Ok(Some(hold(self, id).await?)),
            None => {
                eprintln!("unheld: {} says no way to hold a row", self.backend.name());
                Ok(None)
            }
        }
    }

    /// The `store` given to [`Harness::new`], if it is a `T`: what a backend's own tests
    /// need beside the seam (the directory of a database file, say).
    pub fn store<T: std::any::Any>(&self) -> Option<&T> {
        self.store.downcast_ref()
    }

    /// The clock's instant.
    pub fn now(&self) -> DateTime<Utc> {
        self.clock.get()
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.clock
            .advance(chrono::Duration::from_std(by).expect("a small duration"));
    }

    /// Inserts `job` and returns its id.
    pub async fn insert(&self, job: NewJob) -> anyhow::Result<JobId> {
        let id = job.id;
        self.backend.job_insert(&job).await?;
        Ok(id)
    }

    /// Reads a job that must exist.
    pub async fn get(&self, id: JobId) -> anyhow::Result<JobRecord> {
        self.backend
            .job_get(&JobGetParams { id })
            .await?
            .with_context(|| format!("job {id} not found"))
    }

    /// Claims up to `limit` jobs of `queue` for [`Harness::node`] with [`LEASE`].
    pub async fn claim(&self, queue: &str, limit: u32) -> anyhow::Result<Vec<ClaimedJob>> {
        self.claim_as(self.node.id, queue, limit, LEASE).await
    }

    /// Claims for a given node with a given lease.
    pub async fn claim_as(
        &self,
        node: Uuid,
        queue: &str,
        limit: u32,
        lease: Duration,
    ) -> anyhow::Result<Vec<ClaimedJob>> {
        Ok(self
            .backend
            .job_claim(&ClaimParams {
                queue: queue.to_owned(),
                node,
                limit,
                lease,
                kinds: None,
            })
            .await?)
    }

    /// Claims exactly one job of `queue`, failing if there is none.
    pub async fn claim_one(&self, queue: &str) -> anyhow::Result<ClaimedJob> {
        let mut jobs = self.claim(queue, 1).await?;
        ensure!(
            jobs.len() == 1,
            "expected one job to claim, got {}",
            jobs.len()
        );
        Ok(jobs.remove(0))
    }

    /// Reports one outcome and returns its result.
    pub async fn finish(&self, lease: Lease, outcome: Outcome) -> anyhow::Result<FinishResult> {
        let results = self
            .backend
            .job_finish_many(&[Finish { lease, outcome }])
            .await?;
        match results.as_slice() {
            [one] => Ok(*one),
            other => bail!("expected one result, got {other:?}"),
        }
    }

    /// The backend's maintenance (checked by [`Harness::new`]).
    pub fn maintenance(&self) -> &dyn MaintenanceStore {
        self.backend
            .maintenance()
            .expect("Harness::new checked that the backend does maintenance")
    }

    /// The backend's unique inserts and periodic jobs, if it offers them (a case that needs
    /// them says so when skipped).
    pub fn scheduling(&self) -> Option<&dyn SchedulingStore> {
        let store = self.backend.scheduling();
        if store.is_none() {
            eprintln!("skipped: {} offers no SchedulingStore", self.backend.name());
        }
        store
    }

    /// The backend's per-minute statistics, if it offers them.
    pub fn stats(&self) -> Option<&dyn StatsStore> {
        let store = self.backend.stats();
        if store.is_none() {
            eprintln!("skipped: {} offers no StatsStore", self.backend.name());
        }
        store
    }

    /// Makes due scheduled jobs available; says how many and when the next is due.
    pub async fn promote_outcome(&self) -> anyhow::Result<JobPromoteOutcome> {
        Ok(self.maintenance().job_promote_scheduled().await?)
    }

    /// Makes due scheduled jobs available; returns how many.
    pub async fn promote(&self) -> anyhow::Result<u64> {
        Ok(self.promote_outcome().await?.promoted)
    }
}

/// A node description.
pub fn node_info(name: &str) -> NodeInfo {
    NodeInfo {
        id: Uuid::now_v7(),
        name: name.to_owned(),
        queues: vec!["default".to_owned()],
        concurrency: 4,
    }
}

/// A job of `kind` on `queue` with small arguments.
pub fn job(kind: &str, queue: &str) -> NewJob {
    NewJob::new(kind, json!({ "kind": kind })).with_queue(queue)
}

/// A retryable failure.
pub fn retry(error: &str, retry_in: Duration) -> Outcome {
    Outcome::Retry {
        error: error.to_owned(),
        retry_in,
        duration_ms: 7,
    }
}

/// A completion.
pub fn completed() -> Outcome {
    Outcome::Completed { duration_ms: 5 }
}

/// `chrono` duration from seconds, for timestamp arithmetic.
pub fn secs(n: i64) -> chrono::Duration {
    chrono::Duration::seconds(n)
}

/// Declares one `#[tokio::test]` per conformance case, each run against a fresh harness
/// from `$harness` (an `async fn() -> anyhow::Result<Harness>` in scope at the call site).
/// The list below is the suite: a case not listed here is not run by any backend.
#[macro_export]
macro_rules! conformance_suite {
    ($harness:ident) => {
        $crate::conformance_suite!(@cases $harness;
            jobs {
                insert_then_get_returns_every_field,
                group_and_unique_key_round_trip,
                get_of_unknown_id_is_none,
                insert_many_writes_100k_jobs_in_one_call,
                insert_many_of_nothing_is_a_no_op,
                list_filters_by_queue_state_and_kind,
                list_pages_newest_first_with_before_cursor,
                listings_leave_out_values_over_the_listed_bound,
                queue_stats_count_every_state,
                migrate_twice_is_a_no_op,
                duplicate_ids_are_a_conflict,
            }
            claim {
                claim_takes_high_before_normal_before_low,
                claim_is_fifo_within_a_priority,
                claim_takes_only_the_requested_queue_and_at_most_limit,
                claim_grants_a_lease_capped_by_the_job_timeout,
                claim_skips_scheduled_running_and_finished_jobs,
                concurrent_claims_never_hand_out_a_job_twice,
                a_claim_of_some_kinds_leaves_the_others_untouched,
            }
            finish {
                complete_with_the_current_lease_is_recorded,
                retry_schedules_after_the_delay_and_records_the_error,
                last_attempt_dead_letters_keeping_every_error,
                failed_outcome_dead_letters_at_once,
                snooze_does_not_use_an_attempt,
                release_makes_the_job_available_at_once_uncounted,
                finish_many_answers_each_outcome_in_order,
                zero_delay_retry_is_available_and_permanent_failure_is_final,
                an_error_history_keeps_its_most_recent_entries,
                a_long_error_is_kept_cut_to_its_bound,
            }
            leases {
                stale_lease_outcomes_are_refused_and_change_nothing,
                extend_moves_the_lease_forward,
                a_renewal_never_moves_a_lease_earlier,
                finished_job_refuses_a_second_outcome,
                cancel_revokes_a_running_lease,
                leases_of_a_node_are_only_those_it_runs,
                attempts_of_a_node_are_its_jobs_latest_in_any_state,
            }
            scheduling {
                future_job_is_scheduled_until_the_clock_passes_it,
                past_run_at_is_available_at_once,
                insert_many_schedules_future_jobs,
                promote_handles_more_than_one_batch,
            }
            unique {
                unique_keys_follow_their_policy,
                two_jobs_of_a_batch_with_one_key_are_named_when_rejected,
                unique_windows_hold_after_the_job_finished,
                prune_keeps_a_finished_job_until_its_unique_window_passed,
            }
            fairness {
                groups_take_turns_whatever_their_backlog,
                a_job_running_when_its_queue_became_grouped_is_claimed_after_a_retry,
            }
            kinds {
                a_plain_queue_claims_only_the_asked_kinds,
                a_limited_queue_claims_only_the_asked_kinds,
                a_fair_queue_claims_only_the_asked_kinds,
                concurrent_claims_of_different_kinds_get_only_theirs,
            }
            limits {
                paused_queues_are_not_claimed_until_resumed,
                concurrency_limit_counts_running_jobs_of_every_node,
                per_group_limit_caps_each_group,
                rate_limit_refills_with_the_clock,
                setting_the_same_rate_again_does_not_refill_the_bucket,
            }
            cron {
                periodic_ticks_are_enqueued_once,
            }
            nodes {
                expired_lease_is_rescued_as_a_failed_attempt,
                expired_lease_on_last_attempt_dead_letters,
                dead_node_jobs_are_released_before_their_leases_expire,
                a_dead_nodes_held_job_keeps_its_node_until_released,
                a_stopping_node_releases_what_still_runs_under_it,
                heartbeating_node_keeps_its_jobs,
                rescue_takes_back_every_expired_lease,
                vanished_node_jobs_are_released_at_once,
                a_held_liveness_lock_keeps_a_silent_node_alive,
                a_liveness_lock_is_held_by_one_holder_at_a_time,
                registered_nodes_are_listed_as_their_last_heartbeat_left_them,
                registered_nodes_are_paged_by_name_bytes_then_id,
            }
            admin {
                retry_of_failed_job_gives_fresh_attempts,
                retry_of_cancelled_job_makes_it_available,
                retry_or_cancel_of_completed_job_is_a_conflict,
                retry_or_cancel_of_unknown_job_is_not_found,
                cancel_of_queued_jobs_is_immediate,
                clear_deletes_all_but_running_jobs,
            }
            operations {
                search_filters_by_creation_time,
                delete_removes_a_job_unless_it_runs,
                retry_many_retries_failed_jobs_only,
                retry_many_skips_jobs_whose_unique_key_is_taken,
                stats_per_minute_count_and_time_finished_jobs,
            }
            retention {
                prune_deletes_finished_jobs_past_their_state_retention,
                prune_deletes_at_most_the_limit_per_call,
                prune_takes_the_oldest_first,
                prune_reads_on_past_the_previous_batch,
            }
            meta {
                meta_round_trips_through_every_path,
                replace_takes_the_new_jobs_meta,
                bad_meta_is_refused_and_nothing_is_written,
                list_and_search_filter_by_meta_containment,
            }
            logs {
                logs_are_kept_per_attempt_bounded_and_deleted_with_the_job,
            }
            input {
                scalar_args_are_refused_and_nothing_is_written,
                args_over_the_size_limit_are_refused,
                bad_queue_and_kind_names_are_refused,
                one_bad_job_in_a_bulk_insert_writes_none,
                invalid_options_are_refused,
                injection_in_filters_is_harmless,
            }
        );
    };
    (@cases $harness:ident; $($module:ident { $($case:ident),* $(,)? })*) => {
        $(
            mod $module {
                $(
                    #[$crate::tokio::test(crate = "hopper_conformance::tokio")]
                    async fn $case() -> anyhow::Result<()> {
                        let h = super::$harness().await?;
                        $crate::$module::$case(&h).await
                    }
                )*
            }
        )*
    };
}
