//! The storage conformance suite (`hopper-conformance`) run against SQLite: every case gets
//! its own migrated database file in a temporary directory (`crate::common::harness`).

use crate::common::harness;

hopper_conformance::conformance_suite!(harness);
