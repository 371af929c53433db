//! The `hopper` binary's durations (`--delay`, `--timeout`, `--heartbeat`, `--lease`,
//! retention and intervals) and what the binary does with one once parsed.
//!
//! The parser is `crates/hopper-cli/src/duration.rs`, a module of the binary's library
//! with no dependency on the rest of the binary; it is compiled in here on its own so the
//! fuzz build does not instrument the whole CLI (HTTP server, ZeroMQ, ...).
//!
//! Properties: no text makes parsing, the serve checks or a job built with the duration
//! panic (overflow included).
#![no_main]

#[path = "../../crates/hopper-cli/src/duration.rs"]
#[allow(dead_code)]
mod duration;

use hopper_core::NewJob;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(d) = duration::parse_duration("--delay", text) else {
        return;
    };
    let five = std::time::Duration::from_secs(5);
    let _ = duration::check_serve_timing(d, d, d);
    let _ = duration::check_serve_timing(d, d.saturating_mul(3), d.saturating_mul(2));
    let _ = duration::check_serve_timing(five, d, five);
    let _ = duration::check_serve_timing(five, five.saturating_mul(2), d);
    let job = NewJob::new("k", serde_json::json!({}))
        .with_delay(d)
        .with_timeout(d)
        .with_unique_key("k")
        .with_unique_window(d);
    assert!(job.run_at.is_some());
    let _ = job.validate();
    let _ = job.timeout_ms();
    let _ = job.unique_window_start(chrono::Utc::now());
});
