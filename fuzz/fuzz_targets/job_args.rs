//! A job as an enqueue receives it: names, options and JSON arguments, validated by
//! `NewJob::validate`, then the arguments decoded into a typed `JobArgs` as a worker does.
//!
//! Properties: nothing panics or overflows the stack (deeply nested JSON included); a job
//! that validates has names of the allowed characters, object or array arguments within the
//! size limit, and at least one attempt.
#![no_main]

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use hopper_core::job::{MAX_ARGS_BYTES, validate_name};
use hopper_core::{JobArgs, NewJob, Priority};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use serde::{Deserialize, Serialize};

#[derive(Debug, Arbitrary)]
struct Input {
    kind: String,
    queue: String,
    group: Option<String>,
    unique_key: Option<String>,
    unique_window_ms: Option<u64>,
    max_attempts: i32,
    timeout_ms: u64,
    priority: String,
    args: String,
}

/// A worker's arguments, with the shapes serde has to check: nested structs, enums,
/// optional and defaulted fields, maps and numbers of a fixed width.
#[derive(Debug, Serialize, Deserialize)]
#[allow(dead_code)]
struct Typed {
    to: String,
    #[serde(default)]
    cc: Vec<String>,
    retries: Option<u8>,
    mode: Mode,
    #[serde(default)]
    meta: BTreeMap<String, serde_json::Value>,
    nested: Option<Box<Typed>>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Plain,
    Html { template: String },
    Scheduled(i64),
}

impl JobArgs for Typed {
    const KIND: &'static str = "typed";
}

fuzz_target!(|input: Input| {
    let _ = Priority::from_str(&input.priority);
    let Ok(args) = serde_json::from_str::<serde_json::Value>(&input.args) else {
        return;
    };
    let _ = serde_json::from_value::<Typed>(args.clone());
    let mut job = NewJob::new(input.kind, args)
        .with_queue(input.queue)
        .with_max_attempts(input.max_attempts)
        .with_timeout(Duration::from_millis(input.timeout_ms));
    if let Some(group) = input.group {
        job = job.with_group(group);
    }
    if let Some(key) = input.unique_key {
        job = job.with_unique_key(key);
    }
    if let Some(ms) = input.unique_window_ms {
        job = job.with_unique_window(Duration::from_millis(ms));
    }
    if job.validate().is_ok() {
        assert!(validate_name("queue", &job.queue).is_ok());
        assert!(
            job.kind
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.:".contains(&b))
        );
        assert!(job.args.is_object() || job.args.is_array());
        let size = serde_json::to_vec(&job.args)
            .map(|v| v.len())
            .unwrap_or(usize::MAX);
        assert!(size <= MAX_ARGS_BYTES, "{size} bytes passed");
        assert!(job.max_attempts >= 1);
        let _ = job.unique_window_start(chrono::Utc::now());
    }
});
