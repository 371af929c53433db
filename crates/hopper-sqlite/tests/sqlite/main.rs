//! The SQLite backend against real database files, one temporary directory per test: the
//! storage conformance suite, what only SQLite does, unreadable rows, several processes on
//! one file, the whole worker runtime.
//!
//! One test binary with modules, so the workspace links it once.

mod common;

mod conformance;
mod kinds;
mod methods;
mod poison;
mod processes;
mod runtime;
