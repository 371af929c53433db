//! The bounds every way in applies to times and durations: one set, so that the Rust API,
//! the CLI, the HTTP API, the ZeroMQ server, the SQL function `hopper.enqueue` and both
//! backends accept and refuse the same values.
//!
//! - An instant (`run_at`, a periodic entry's next run) is finite and inside
//!   [`MIN_INSTANT_MICROS`] ..= [`MAX_INSTANT_MICROS`]: from 1970-01-01T00:00:00Z to
//!   9999-12-31T23:59:59.999999Z. PostgreSQL also stores `infinity` and years up to
//!   294276, and chrono cannot decode either end; a row outside this range would stop
//!   every query that reads it, so none is ever written.
//! - A duration (a delay, a worker's `retry_in` or snooze, a lease extension, a timeout,
//!   a unique window) is at most [`MAX_DURATION`], ten years of 365 days. Ten years is far
//!   beyond any real delay and keeps `now + duration` inside the instant range until the
//!   year 9989. A timeout is also stored as whole milliseconds in a 32-bit column, so it
//!   stops at [`MAX_TIMEOUT`] (about 24.8 days) first.
//!
//! `migrations/0007_enqueue_bounds.sql` of the PostgreSQL backend writes the same numbers
//! into `hopper.enqueue`; a test there checks they agree.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};

/// The earliest instant accepted, in microseconds since the Unix epoch: the epoch itself.
pub const MIN_INSTANT_MICROS: i64 = 0;

/// The latest instant accepted, in microseconds since the Unix epoch:
/// 9999-12-31T23:59:59.999999Z.
pub const MAX_INSTANT_MICROS: i64 = 253_402_300_800_000_000 - 1;

/// The longest duration accepted anywhere: ten years of 365 days.
pub const MAX_DURATION: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// [`MAX_DURATION`] in milliseconds, the unit of the wire protocol and the HTTP API.
pub const MAX_DURATION_MS: u64 = 10 * 365 * 24 * 3600 * 1000;

/// The longest timeout accepted: `i32::MAX` milliseconds (about 24.8 days), the most its
/// column holds.
pub const MAX_TIMEOUT: Duration = Duration::from_millis(i32::MAX as u64);

/// The earliest instant accepted (the Unix epoch).
pub fn min_instant() -> DateTime<Utc> {
    DateTime::UNIX_EPOCH
}

/// The latest instant accepted (9999-12-31T23:59:59.999999Z).
pub fn max_instant() -> DateTime<Utc> {
    DateTime::from_timestamp_micros(MAX_INSTANT_MICROS).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Returns `at` when it lies inside the accepted range, or an [`Error::InvalidInput`] that
/// names `what` and the range.
pub fn check_instant(what: &str, at: DateTime<Utc>) -> Result<DateTime<Utc>> {
    let us = at.timestamp_micros();
    if (MIN_INSTANT_MICROS..=MAX_INSTANT_MICROS).contains(&us) {
        Ok(at)
    } else {
        Err(Error::InvalidInput(format!(
            "{what} {} is out of range: instants must lie between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z",
            at.to_rfc3339()
        )))
    }
}

/// Returns `d` when it is at most [`MAX_DURATION`], or an [`Error::InvalidInput`] that
/// names `what` and the bound.
pub fn check_duration(what: &str, d: Duration) -> Result<Duration> {
    if d <= MAX_DURATION {
        Ok(d)
    } else {
        Err(Error::InvalidInput(format!(
            "{what} of {} ms is too long: durations are at most {MAX_DURATION_MS} ms (10 years)",
            d.as_millis()
        )))
    }
}

/// [`check_duration`] for the period of a loop that queries or waits (a poll, a rescue, a
/// handshake): zero too is refused, as a loop without pause.
pub fn check_interval(what: &str, d: Duration) -> Result<Duration> {
    if d.is_zero() {
        return Err(Error::InvalidInput(format!(
            "{what} must be more than zero: a loop without pause"
        )));
    }
    check_duration(what, d)
}

/// The most of any count in a runtime's or a server's settings (concurrency, batches,
/// prefetch, pools, connections): a million. Past it a setting is a mistake, and sums of
/// such counts must not overflow.
pub const MAX_COUNT: usize = 1_000_000;

/// Returns `n` when it is at most [`MAX_COUNT`], or an [`Error::InvalidInput`] that names
/// `what` and the bound.
pub fn check_count(what: &str, n: usize) -> Result<usize> {
    if n <= MAX_COUNT {
        Ok(n)
    } else {
        Err(Error::InvalidInput(format!(
            "{what} of {n} is too large: at most {MAX_COUNT}"
        )))
    }
}

/// The most entries a job's error history keeps (20): each failed, rescued or released
/// attempt adds one, and past this the oldest go, so that a job retried without end (a
/// large `max_attempts` that fails forever) does not grow without limit. The first
/// attempts' errors are rarely the ones read; the most recent are.
pub const MAX_ERROR_HISTORY: i32 = 20;

/// `history` (a job's error history, a JSON array) with `entry` appended, keeping the latest
/// [`MAX_ERROR_HISTORY`] entries: the oldest are cut only once it is full. A history that
/// is not an array (only one written by hand can be) becomes `[entry]`. SQLite runs this as
/// the SQL function `error_history_pushed`; PostgreSQL's
/// `hopper.error_history_pushed` (migration 0016) does the same in SQL.
///
/// ```
/// use hopper_core::limits::{MAX_ERROR_HISTORY, error_history_pushed};
/// use serde_json::json;
///
/// let full: Vec<_> = (0..MAX_ERROR_HISTORY).map(|n| json!(n)).collect();
/// let pushed = error_history_pushed(json!(full), json!("new"));
/// assert_eq!(pushed[0], json!(1));
/// assert_eq!(pushed[MAX_ERROR_HISTORY as usize - 1], json!("new"));
/// assert_eq!(error_history_pushed(json!({}), json!("new")), json!(["new"]));
/// ```
pub fn error_history_pushed(
    history: serde_json::Value,
    entry: serde_json::Value,
) -> serde_json::Value {
    let keep = usize::try_from(MAX_ERROR_HISTORY).unwrap_or(1).max(1);
    let mut entries = match history {
        serde_json::Value::Array(entries) => entries,
        _ => Vec::new(),
    };
    let over = (entries.len() + 1).saturating_sub(keep);
    entries.drain(..over);
    entries.push(entry);
    serde_json::Value::Array(entries)
}

/// The longest error message a job's history keeps of one attempt, in bytes (8 KiB, and
/// the marker of a cut): a worker's error can be as long as its frame or its `Display`
/// makes it, and a listing returns every job's history whole. [`bounded_error`] cuts a
/// longer one.
pub const MAX_ERROR_BYTES: usize = 8 * 1024;

/// Of an error cut by [`bounded_error`], how much of its end is kept (1 KiB): the last
/// lines of a message (the innermost cause, a client's own marker of a cut) say as much
/// as its first.
const ERROR_TAIL_BYTES: usize = 1024;

/// `error` as stored: whole up to [`MAX_ERROR_BYTES`], else its first 7 KiB and its last
/// 1 KiB (cut at characters' boundaries) around a marker that says how much was cut.
pub fn bounded_error(error: &str) -> std::borrow::Cow<'_, str> {
    if error.len() <= MAX_ERROR_BYTES {
        return std::borrow::Cow::Borrowed(error);
    }
    let mut head = MAX_ERROR_BYTES - ERROR_TAIL_BYTES;
    while !error.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = error.len() - ERROR_TAIL_BYTES;
    while !error.is_char_boundary(tail) {
        tail += 1;
    }
    std::borrow::Cow::Owned(format!(
        "{} … [{} of {} bytes cut] … {}",
        &error[..head],
        tail - head,
        error.len(),
        &error[tail..]
    ))
}

/// The shortest heartbeat period a `hopper serve` announces (10 ms).
pub const MIN_HEARTBEAT: Duration = Duration::from_millis(10);

/// Checks a server's heartbeat period and lease: a heartbeat of at least
/// [`MIN_HEARTBEAT`], a lease at least twice it (a worker renews it once a period), neither
/// past [`MAX_DURATION`]. Any pair is answered, however large (no overflow).
pub fn check_timing(heartbeat: Duration, lease: Duration) -> Result<()> {
    check_duration("heartbeat", heartbeat)?;
    check_duration("lease", lease)?;
    if heartbeat < MIN_HEARTBEAT || lease < heartbeat * 2 {
        return Err(Error::InvalidInput(format!(
            "the heartbeat must be at least {MIN_HEARTBEAT:?} and the lease at least twice it (heartbeat {heartbeat:?}, lease {lease:?})"
        )));
    }
    Ok(())
}

/// Checks how long a node may stay silent before the others take it for dead against its
/// heartbeat period: at least twice it, or a live node would be taken for dead between two
/// of its beats. Any pair is answered, however large (no overflow).
pub fn check_node_timeout(heartbeat: Duration, node_dead_after: Duration) -> Result<()> {
    check_duration("node_dead_after", node_dead_after)?;
    if node_dead_after < heartbeat.saturating_mul(2) {
        return Err(Error::InvalidInput(format!(
            "node_dead_after of {node_dead_after:?} is too short: at least twice the heartbeat ({heartbeat:?}), or live nodes would be taken for dead between their beats"
        )));
    }
    Ok(())
}

/// A duration given in milliseconds (the wire protocol's and the HTTP API's unit),
/// checked against [`MAX_DURATION`].
pub fn duration_ms(what: &str, ms: u64) -> Result<Duration> {
    check_duration(what, Duration::from_millis(ms))
}

/// `from + d`, both checked: `d` against [`MAX_DURATION`], the sum against the instant
/// range. What a delay, a retry or a snooze turns into.
pub fn instant_after(what: &str, from: DateTime<Utc>, d: Duration) -> Result<DateTime<Utc>> {
    let d = check_duration(what, d)?;
    let at = chrono::Duration::from_std(d)
        .ok()
        .and_then(|d| from.checked_add_signed(d))
        .ok_or_else(|| {
            Error::InvalidInput(format!(
                "{what} of {} ms from {} is out of range",
                d.as_millis(),
                from.to_rfc3339()
            ))
        })?;
    check_instant(what, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_error_keeps_its_ends_cut_at_character_boundaries() {
        assert_eq!(bounded_error("short"), "short");
        let whole = format!("a{}z", "é".repeat(MAX_ERROR_BYTES));
        let cut = bounded_error(&whole);
        let head = format!(
            "a{}",
            "é".repeat((MAX_ERROR_BYTES - ERROR_TAIL_BYTES) / 2 - 1)
        );
        let tail = format!("{}z", "é".repeat(ERROR_TAIL_BYTES / 2 - 1));
        let gone = whole.len() - head.len() - tail.len();
        let marker = format!(" … [{gone} of {} bytes cut] … ", whole.len());
        assert_eq!(cut, format!("{head}{marker}{tail}"));
        assert!(cut.len() <= MAX_ERROR_BYTES + 40);
    }

    #[test]
    fn server_timings_are_answered_however_large() {
        let ms = Duration::from_millis;
        assert!(check_timing(ms(10), ms(20)).is_ok());
        assert!(check_timing(ms(9), ms(20)).is_err());
        assert!(check_timing(ms(10), ms(19)).is_err());
        assert!(check_timing(Duration::MAX, Duration::MAX).is_err());
        assert!(
            check_timing(MAX_DURATION, MAX_DURATION).is_err(),
            "twice is past it"
        );
        assert!(check_timing(MAX_DURATION / 2, MAX_DURATION).is_ok());
        assert!(check_node_timeout(ms(10), ms(20)).is_ok());
        assert!(check_node_timeout(ms(10), ms(19)).is_err());
        assert!(check_node_timeout(Duration::MAX, MAX_DURATION).is_err());
        assert!(check_node_timeout(ms(10), Duration::MAX).is_err());
    }

    #[test]
    fn instants_outside_the_range_are_refused() {
        assert!(check_instant("run_at", min_instant()).is_ok());
        assert!(check_instant("run_at", max_instant()).is_ok());
        assert!(check_instant("run_at", Utc::now()).is_ok());
        let before = min_instant() - chrono::Duration::microseconds(1);
        let after = max_instant() + chrono::Duration::microseconds(1);
        assert!(check_instant("run_at", before).is_err());
        assert!(check_instant("run_at", after).is_err());
        assert!(check_instant("run_at", DateTime::<Utc>::MAX_UTC).is_err());
        assert!(check_instant("run_at", DateTime::<Utc>::MIN_UTC).is_err());
        assert_eq!(
            max_instant().to_rfc3339(),
            "9999-12-31T23:59:59.999999+00:00"
        );
    }

    #[test]
    fn durations_have_one_bound() {
        assert!(check_duration("delay", MAX_DURATION).is_ok());
        assert!(check_duration("delay", MAX_DURATION + Duration::from_millis(1)).is_err());
        assert!(duration_ms("retry_in", MAX_DURATION_MS).is_ok());
        assert!(duration_ms("retry_in", MAX_DURATION_MS + 1).is_err());
        assert!(duration_ms("retry_in", u64::MAX).is_err());
        assert!(duration_ms("retry_in", i64::MAX as u64).is_err());
        assert_eq!(MAX_DURATION.as_millis(), u128::from(MAX_DURATION_MS));
        assert!(MAX_TIMEOUT < MAX_DURATION);
    }

    #[test]
    fn instant_after_checks_both_the_duration_and_the_sum() {
        let now = Utc::now();
        assert!(instant_after("delay", now, MAX_DURATION).is_ok());
        assert!(instant_after("delay", now, Duration::MAX).is_err());
        assert!(instant_after("delay", max_instant(), Duration::from_secs(1)).is_err());
    }
}
