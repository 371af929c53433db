//! The library's integration tests against the real PostgreSQL and SQLite, one module per
//! subject, each test in its own schema or database file.
//!
//! One test binary with modules, so the workspace links it once. The OpenTelemetry tests
//! (`tests/otel.rs`) are a binary of their own: they set the process's global tracer
//! provider. So is `tests/postgres_vacuum.rs`, which needs no other transaction open in the
//! database.

#[macro_use]
mod support;

mod hostile_counts;
mod hostile_outcomes;
mod hostile_rows;
mod hostile_sql;
mod injection;
mod maintenance_failures;
mod middleware;
mod postgres_claim_cursor;
mod postgres_conformance;
mod postgres_connect;
mod postgres_failover;
mod postgres_held_nodes;
mod postgres_lock_order;
mod postgres_migrations;
mod postgres_pgbouncer;
mod postgres_plans;
mod postgres_retry_many;
mod postgres_sql;
mod postgres_sqlx;
mod postgres_stale_statements;
mod postgres_standby;
mod postgres_tls;
mod runtime_config;
mod runtime_failures;
mod runtime_hostile_workers;
mod runtime_job_logs;
mod runtime_liveness;
mod runtime_load;
mod runtime_prefetch;
mod runtime_signals;
mod scheduling;
mod smoke;
mod supervise;
mod testing_inline;
mod testing_require;
mod testing_run;
