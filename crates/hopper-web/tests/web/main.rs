//! The HTTP API, the dashboard and `/metrics`, called in-process with
//! `tower::ServiceExt::oneshot` against the real PostgreSQL, each test in its own schema.
//!
//! One test binary with modules, so the workspace links it once.

mod auth;
mod common;
mod cross_site;
mod dashboard;
mod jobs;
mod listing;
mod meta;
mod nodes;
mod scheduling;
mod security;
mod stats;
