//! Periodic jobs' schedules: cron expressions (croner) read in a time zone (chrono-tz)
//! through hopper's `PeriodicJob`, and the tick planning after downtime.
//!
//! Properties: no schedule or zone panics or hangs; the next tick is strictly later; a plan
//! lists due ticks in order, none after `now`, at most `MAX_CATCH_UP`, and a next tick after
//! `now`.
#![no_main]

use chrono::{DateTime, Utc};
use hopper::PeriodicJob;
use hopper_core::NewJob;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

/// `hopper::periodic::MAX_CATCH_UP` (not exported).
const MAX_CATCH_UP: usize = 1000;

#[derive(Debug, Arbitrary)]
struct Input {
    schedule: String,
    timezone: Option<String>,
    /// Seconds since the epoch, folded into 1970-2100.
    at: u32,
    /// How long the node was down, in seconds.
    down: u32,
    catch_up: bool,
}

fuzz_target!(|input: Input| {
    let job = NewJob::new("tick", serde_json::json!({}));
    let Ok(mut periodic) = PeriodicJob::new("fuzz", &input.schedule, job) else {
        return;
    };
    if let Some(zone) = &input.timezone {
        match periodic.with_timezone(zone) {
            Ok(p) => periodic = p,
            Err(_) => return,
        }
    }
    let periodic = periodic.with_catch_up(input.catch_up);
    let Some(at) = DateTime::<Utc>::from_timestamp(i64::from(input.at) * 2, 0) else {
        return;
    };
    let Some(next) = periodic.next_after(at) else {
        return;
    };
    assert!(next > at, "{next} is not after {at}");
    let now = at + chrono::Duration::seconds(i64::from(input.down));
    if let Some((ticks, next_after_now)) = periodic.plan(next, now) {
        assert!(!ticks.is_empty());
        assert!(ticks.len() <= MAX_CATCH_UP);
        assert!(ticks.windows(2).all(|w| w[0] < w[1]), "ticks out of order");
        assert!(ticks.iter().all(|t| *t <= now && *t >= next));
        assert!(next_after_now > now);
    } else {
        assert!(next > now);
    }
});
