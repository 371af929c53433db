//! Helpers for testing code that uses hopper (and for hopper's own tests). See
//! `docs/testing.md` for a walk through them.
//!
//! - **Assert what was enqueued**: [`require_inserted`], [`require_many_inserted`] and
//!   [`require_not_inserted`] compare the stored jobs with [`ExpectedJob`]s (kind, exact or
//!   partial arguments, queue, priority, maximum attempts, state); the `_in` forms look
//!   inside the caller's PostgreSQL transaction, before it commits or rolls back.
//! - **Run one job of a worker**: [`run_job`] and [`run_new_job`] insert, claim and run one
//!   job on a private in-memory SQLite database and return its [`JobOutcome`] (completed,
//!   retry, failed, snoozed, cancelled) with the job as stored afterwards.
//! - **Inline mode**: an [`InlineClient`] runs every job it enqueues at once, in the
//!   enqueueing task, through registered workers, on any backend.
//! - **Isolated databases**: a [`TestDatabase`] is a fresh migrated PostgreSQL schema per
//!   test, dropped afterwards, so tests run in parallel.
//! - **Private clusters**: a [`TestCluster`] is a PostgreSQL server of the test's own
//!   (`initdb`, a free port), for TLS with the test's certificates and for failover.

mod cluster;
mod database;
mod expect;
mod inline;
mod require;
mod run;

pub use cluster::{ClusterError, StopMode, TestCluster};
pub use database::{TestDatabase, database_url, drop_schema};
pub use expect::ExpectedJob;
pub use inline::InlineClient;
pub use require::{
    LISTED, RequireError, require_inserted, require_inserted_in, require_many_inserted,
    require_many_inserted_in, require_not_inserted, require_not_inserted_in,
};
pub use run::{JobOutcome, JobRun, run_job, run_new_job};
