//! # hopper
//!
//! A durable background-job queue. Its state lives in one of three places, behind the same
//! [`Client`], [`Worker`] and [`Runtime`]:
//!
//! - **PostgreSQL** ([`PgBackend`]): the production backend, many nodes on one database.
//! - **SQLite** ([`SqliteBackend`]): embedded, one file, for one machine (several processes
//!   may share the file); [`connect`] picks it for a `sqlite:` path.
//! - **A `hopper serve` server** ([`RemoteBackend`]): the runtime needs no database
//!   credentials; it speaks ZeroMQ + CBOR to the server (`docs/protocol.md`), as the Python
//!   client does; [`connect`] picks it for a `tcp://` endpoint.
//!
//! - **Enqueue** typed jobs one at a time, in bulk (binary COPY on PostgreSQL), or from SQL
//!   (`SELECT hopper.enqueue('kind', '{"n": 1}')`): [`Client`]; inside your own PostgreSQL
//!   transaction, tokio-postgres or sqlx: [`postgres`].
//! - **Run** them with a [`Worker`] per kind in a [`Runtime`]: bounded concurrency, batched
//!   claims (`FOR UPDATE SKIP LOCKED`) and batched outcomes, LISTEN/NOTIFY wake-ups with a
//!   polling fallback, heartbeats, timeouts, graceful shutdown.
//! - **Rely on** at-least-once delivery with fenced leases: every claim is a new attempt
//!   `(job id, attempt)`; an outcome reported with a stale lease is refused with
//!   [`Error::LeaseLost`]. Crashed workers' jobs come back when their lease expires or their
//!   node stops heartbeating. Failed attempts retry with exponential backoff and jitter,
//!   then land in the dead letter state `failed`, with every attempt's error kept.
//! - **Test** with [`testing`]: assert what was enqueued (inside a transaction too), run one
//!   job of a worker and get its outcome, or run every enqueued job at once (inline mode).
//!
//! Cargo features pick the backends compiled in: `postgres`, `sqlite` and `remote` (all
//! three by default), and `sqlx` (off by default). `default-features = false, features =
//! ["postgres"]` builds neither the bundled SQLite C library nor ZeroMQ; see the README.
//!
//! ```no_run
//! use hopper::{Client, JobArgs, JobContext, JobError, Runtime, RuntimeConfig, Worker, Workers};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Greet { name: String }
//!
//! impl JobArgs for Greet {
//!     const KIND: &'static str = "greet";
//! }
//!
//! struct Greeter;
//!
//! #[async_trait::async_trait]
//! impl Worker for Greeter {
//!     type Args = Greet;
//!     async fn process(&self, _ctx: &JobContext, args: Greet) -> Result<(), JobError> {
//!         println!("hello, {}", args.name);
//!         Ok(())
//!     }
//! }
//!
//! # async fn run() -> hopper::Result<()> {
//! let client = Client::connect("postgres://postgres@127.0.0.1/postgres").await?;
//! client.migrate().await?;
//! client.enqueue(&Greet { name: "world".into() }).await?;
//!
//! let mut workers = Workers::new();
//! workers.register(Greeter);
//! let handle = Runtime::new(client.backend().clone(), workers, RuntimeConfig::default())
//!     .start()
//!     .await?;
//! handle.run_until_signal().await;
//! # Ok(()) }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod client;
mod context;
mod control;
mod log_sink;
pub mod maintenance;
pub mod metrics;
pub mod middleware;
#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub mod otel;
pub mod outcomes;
mod periodic;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
pub mod readings;
mod registry;
#[cfg(feature = "remote")]
#[cfg_attr(docsrs, doc(cfg(feature = "remote")))]
pub mod remote;
mod runtime;
pub mod spans;
pub mod supervise;
pub mod testing;
mod worker;

pub use client::{Client, ConnectOptions, connect};
pub use context::JobContext;
pub use hopper_core::backend::{AppliedMigration, JobListParams, QueueStats};
pub use hopper_core::job_log::{AttemptLog, LogLevel, LogLine};
pub use hopper_core::{
    AttemptError, Clock, Error, JobArgs, JobId, JobRecord, JobState, Lease, NewJob, Priority,
    Result, SystemClock, TestClock,
};
pub use hopper_core::{
    CronEntry, InsertOutcome, QueueSettings, QueueUpdate, RateLimit, UniquePolicy,
};
pub use hopper_core::{NodeCursor, NodeListParams, NodePage};
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use hopper_sqlite::{SqliteBackend, SqliteOptions};
pub use periodic::{PERIODIC_META, PeriodicJob};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::{
    ClaimCursorConfig, ClaimStartMode, ConnectError, PgBackend, PgConnectOptions, PgOptions, Pooler,
};
pub use registry::Workers;
#[cfg(feature = "remote")]
#[cfg_attr(docsrs, doc(cfg(feature = "remote")))]
pub use remote::{RemoteBackend, RemoteOptions};
pub use runtime::{Runtime, RuntimeConfig, RuntimeHandle, shutdown_signal};
pub use supervise::Health;
pub use worker::{JobError, Worker, default_backoff};

/// The storage seam between the runtime and the backends ([`backend::Backend`] and its
/// capability traits, their params and results): for backend authors, and **outside
/// semver** (see its module docs). [`Client`], [`Runtime`] and [`testing`] are what an
/// application uses.
pub mod backend {
    pub use hopper_core::backend::*;
}

/// The core crate, for backend authors.
pub use hopper_core as core;

/// The bounds every way in applies to instants and durations.
pub use hopper_core::limits;

/// The README's examples, compiled as doctests so they cannot rot.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
