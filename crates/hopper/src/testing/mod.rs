//! Helpers for testing code that uses hopper (and for hopper's own tests). See
//! `docs/testing.md` for a walk through them.
//!
//! - **Assert what was enqueued**: [`require_inserted`], [`require_many_inserted`] and
//!   [`require_not_inserted`] compare the stored jobs with [`ExpectedJob`]s (kind, exact or
//!   partial arguments, queue, priority, maximum attempts, state); the `_in` forms
//!   (`postgres` feature) look inside the caller's PostgreSQL transaction, before it
//!   commits or rolls back.
//! - **Run one job of a worker** (`sqlite` feature): [`run_job`] and [`run_new_job`]
//!   insert, claim and run one job on a private in-memory SQLite database and return its
//!   [`JobOutcome`] (completed, retry, failed, snoozed, cancelled) with the job as stored
//!   afterwards.
//! - **Inline mode**: an [`InlineClient`] runs every job it enqueues at once, in the
//!   enqueueing task, through registered workers, on any backend.
//! - **PostgreSQL** (`postgres` feature, from `hopper_postgres::testing`): a
//!   [`TestDatabase`] is a fresh migrated schema per test, dropped afterwards, so tests run
//!   in parallel; a [`TestCluster`] is a PostgreSQL server of the test's own (`initdb`, a
//!   free port), for TLS with the test's certificates and for failover; a [`PgBouncer`] in
//!   transaction mode stands in front of the test database ([`TestDatabase::behind`]).

mod expect;
mod inline;
mod require;
mod run;
#[cfg(feature = "sqlite")]
mod run_one;

pub use expect::ExpectedJob;
#[cfg(feature = "postgres")]
pub use hopper_postgres::testing::{
    ClusterError, PgBouncer, PgBouncerConfig, RowHold, StopMode, TestCluster, TestDatabase,
    database_url, drop_schema, with_database,
};
pub use inline::InlineClient;
pub use require::{
    LISTED, RequireError, require_inserted, require_many_inserted, require_not_inserted,
};
#[cfg(feature = "postgres")]
pub use require::{require_inserted_in, require_many_inserted_in, require_not_inserted_in};
pub use run::{JobOutcome, JobRun};
#[cfg(feature = "sqlite")]
pub use run_one::{run_job, run_new_job};
