//! The storage conformance suite: what every [`Backend`] must do, written once against
//! `Arc<dyn Backend>`.
//!
//! A backend runs the whole suite by providing an `async fn() -> anyhow::Result<Harness>`
//! that returns a fresh, migrated, isolated store whose "now" is the harness's
//! [`TestClock`], then invoking [`conformance_suite!`] with it (see
//! `tests/postgres_conformance.rs`). Each case is an `async fn(&Harness)`; each gets its own
//! store, so the cases run in parallel. Time only moves when a case moves the clock: no case
//! sleeps for a lease or a schedule.

#![allow(dead_code)]

pub mod admin;
pub mod claim;
pub mod finish;
pub mod input;
pub mod jobs;
pub mod leases;
pub mod nodes;
pub mod operations;
pub mod retention;
pub mod scheduling;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use chrono::{DateTime, TimeZone, Utc};
use hopper::{
    Backend, ClaimParams, ClaimedJob, Finish, FinishResult, JobId, JobRecord, Lease, NewJob,
    NodeInfo, Outcome, TestClock,
};
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
    _store: Box<dyn std::any::Any + Send + Sync>,
}

impl Harness {
    /// Wraps a backend whose clock is `clock` (set to [`t0`] here). `store` is kept alive
    /// as long as the harness (for example the guard that drops a test schema).
    pub async fn new(
        backend: Arc<dyn Backend>,
        clock: TestClock,
        store: impl std::any::Any + Send + Sync,
    ) -> anyhow::Result<Self> {
        clock.set(t0());
        let node = node_info("conformance");
        backend.node_heartbeat(&node).await?;
        Ok(Harness {
            backend,
            clock,
            node,
            _store: Box::new(store),
        })
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
            .job_get(id)
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

    /// Makes due scheduled jobs available; returns how many.
    pub async fn promote(&self) -> anyhow::Result<u64> {
        Ok(self.backend.job_promote_scheduled().await?.0)
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
/// The caller declares the conformance module with `#[macro_use]`.
macro_rules! conformance_suite {
    ($harness:ident) => {
        conformance_suite!(@cases $harness;
            jobs {
                insert_then_get_returns_every_field,
                group_and_unique_key_round_trip,
                get_of_unknown_id_is_none,
                insert_many_writes_100k_jobs_in_one_call,
                insert_many_of_nothing_is_a_no_op,
                list_filters_by_queue_state_and_kind,
                list_pages_newest_first_with_before_cursor,
                queue_stats_count_every_state,
                migrate_twice_is_a_no_op,
            }
            claim {
                claim_takes_high_before_normal_before_low,
                claim_is_fifo_within_a_priority,
                claim_takes_only_the_requested_queue_and_at_most_limit,
                claim_grants_a_lease_capped_by_the_job_timeout,
                claim_skips_scheduled_running_and_finished_jobs,
                concurrent_claims_never_hand_out_a_job_twice,
            }
            finish {
                complete_with_the_current_lease_is_recorded,
                retry_schedules_after_the_delay_and_records_the_error,
                last_attempt_dead_letters_keeping_every_error,
                failed_outcome_dead_letters_at_once,
                snooze_does_not_use_an_attempt,
                release_makes_the_job_available_at_once_uncounted,
                finish_many_answers_each_outcome_in_order,
            }
            leases {
                stale_lease_outcomes_are_refused_and_change_nothing,
                extend_moves_the_lease_forward,
                finished_job_refuses_a_second_outcome,
                cancel_revokes_a_running_lease,
            }
            scheduling {
                future_job_is_scheduled_until_the_clock_passes_it,
                past_run_at_is_available_at_once,
                insert_many_schedules_future_jobs,
                promote_handles_more_than_one_batch,
            }
            nodes {
                expired_lease_is_rescued_as_a_failed_attempt,
                expired_lease_on_last_attempt_dead_letters,
                dead_node_jobs_are_released_before_their_leases_expire,
                heartbeating_node_keeps_its_jobs,
                rescue_takes_back_every_expired_lease,
                vanished_node_jobs_are_released_at_once,
                a_held_liveness_lock_keeps_a_silent_node_alive,
                a_liveness_lock_is_held_by_one_holder_at_a_time,
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
                stats_per_minute_count_and_time_finished_jobs,
            }
            retention {
                prune_deletes_finished_jobs_past_their_state_retention,
                prune_deletes_at_most_the_limit_per_call,
                prune_takes_the_oldest_first,
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
                    #[tokio::test]
                    async fn $case() -> anyhow::Result<()> {
                        let h = super::$harness().await?;
                        crate::conformance::$module::$case(&h).await
                    }
                )*
            }
        )*
    };
}
