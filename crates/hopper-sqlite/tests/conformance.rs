//! The storage conformance suite (`hopper-conformance`) run against SQLite: every case gets
//! its own migrated database file in a temporary directory (`common::harness`).

mod common;

use common::harness;

hopper_conformance::conformance_suite!(harness);
