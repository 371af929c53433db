//! The `hopper` binary run as a user runs it, as child processes against the real
//! PostgreSQL (private clusters and PgBouncers of the tests' own where a test needs one)
//! and SQLite files, each test in its own schema or directory.
//!
//! One test binary with modules, so the workspace links it once.

mod common;

mod bench_scale;
mod cli;
mod databases;
mod db_restart;
mod demo;
mod ended_sessions;
mod health;
mod hostile;
mod http_connections;
mod http_pool;
mod http_tls;
mod http_tokens;
mod injection;
mod kill;
mod node_death;
mod nodes;
mod open_files;
mod pgbouncer;
mod queues;
mod serve_curve;
mod serve_metrics;
mod serve_stats;
mod sqlite_processes;
mod standby;
mod stop_signals;
