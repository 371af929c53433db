//! The server's integration tests: a server in this process on a test schema, raw protocol
//! peers and the Rust client against it, the real PostgreSQL behind.
//!
//! One test binary with modules, so the workspace links it once. Every test of it logs into
//! one capture once a test reads the logs (a global subscriber): `security` looks only for
//! what its own tests log. Binaries of their own: `curve` and `hostile`, which count log
//! lines any server of the process could write, and `oversized`, which counts the process's
//! listening sockets.

#[path = "../common/mod.rs"]
mod common;

mod admin;
mod adoption;
mod bad_frames;
mod dispatch;
mod drain;
mod fairness;
mod faults;
mod flood;
mod gone_peer;
mod housekeeping;
mod idle_workers;
mod list_bounds;
mod list_pages;
mod log_batching;
mod log_flush;
mod log_held;
mod log_leases;
mod node_pages;
mod outcome_held;
mod pool_share;
mod prefetch;
mod queue_held;
mod refusals;
mod remote_job_logs;
mod remote_meta_logs;
mod request_timeout;
mod security;
mod session;
mod settings;
mod stats_reuse;
