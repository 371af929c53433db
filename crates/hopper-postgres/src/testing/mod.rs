//! PostgreSQL for tests, re-exported by `hopper::testing` (see `docs/testing.md`).
//!
//! - **Isolated databases**: a [`TestDatabase`] is a fresh migrated PostgreSQL schema per
//!   test, dropped afterwards, so tests run in parallel; with
//!   [`TestDatabase::in_own_database`], in a database of its own.
//! - **Private clusters**: a [`TestCluster`] is a PostgreSQL server of the test's own
//!   (`initdb`, a free port), for TLS with the test's certificates and for failover.
//! - **PgBouncer**: a [`PgBouncer`] in transaction mode in front of the test database, for
//!   code that runs behind one ([`TestDatabase::behind`] opens a backend through it).
//! - **Faults**: [`TestDatabase::fail_log_stores`] has the schema's job log stores fail with
//!   a SQLSTATE of the test's choice, the first ones or all.

mod cluster;
mod database;
mod faults;
mod pgbouncer;

pub use cluster::{ClusterError, StopMode, TestCluster};
pub use database::{TestDatabase, database_url, drop_schema, with_database};
pub use faults::RowHold;
pub use pgbouncer::{PgBouncer, PgBouncerConfig};
