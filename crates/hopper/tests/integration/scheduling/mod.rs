//! Scheduling and control against the real database, with measured assertions: tenant
//! fairness, global concurrency and rate limits across runtimes, unique keys under
//! concurrent inserts, pause/resume, cancellation across nodes, periodic jobs, queue
//! weights. Each test has its own schema (`TestDatabase`).

pub mod common;
mod control;
mod fairness;
mod limits;
mod ring;
mod unique;
