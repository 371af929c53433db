//! Conversions between hopper's types and what the SQLite schema stores: times as integer
//! microseconds since the Unix epoch, ids as hyphenated text, JSON as text.

use hopper_core::log_limit::LogThrottle;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use hopper_core::{AttemptError, Error, JobRecord, Priority, Result};
use rusqlite::Row;
use uuid::Uuid;

/// The longest delay stored (about 100 years): keeps `now + delay` inside an `i64` of
/// microseconds, where SQLite would otherwise turn an overflowing sum into a float.
const MAX_DELAY_US: i64 = 100 * 366 * 24 * 3600 * 1_000_000;

/// An instant as stored: microseconds since the epoch (truncated, as PostgreSQL's driver
/// does).
pub fn micros(at: DateTime<Utc>) -> i64 {
    at.timestamp_micros()
}

/// `at` truncated to the microsecond, the precision it is stored with, so that what a
/// caller compares with is what the database holds.
pub fn truncate(at: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(at.timestamp_micros()).unwrap_or(at)
}

/// An instant as JSON text inside the error history (RFC 3339, microseconds, `Z`).
pub fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// A delay in microseconds, capped at about 100 years.
pub fn delay_us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).map_or(MAX_DELAY_US, |us| us.min(MAX_DELAY_US))
}

/// A stored instant back as a time.
pub fn time(us: i64) -> Result<DateTime<Utc>> {
    DateTime::from_timestamp_micros(us)
        .ok_or_else(|| Error::Schema(format!("stored time {us} µs is out of range")))
}

/// A stored optional instant.
pub fn opt_time(us: Option<i64>) -> Result<Option<DateTime<Utc>>> {
    us.map(time).transpose()
}

/// The smallest UUIDv7 of the millisecond `at_us` falls in, as stored (hyphenated
/// lowercase text, which sorts like the 16 bytes): 48 bits of Unix milliseconds, then
/// zeros. Every UUIDv7 made in that millisecond or later is at least this.
pub fn smallest_uuid_v7(at_us: i64) -> String {
    let ms = u64::try_from(at_us.div_euclid(1000)).unwrap_or(0) & 0xffff_ffff_ffff;
    let hex = format!("{ms:012x}");
    format!("{}-{}-0000-0000-000000000000", &hex[..8], &hex[8..])
}

/// A stored id.
pub fn uuid(text: &str) -> Result<Uuid> {
    Uuid::parse_str(text).map_err(|e| Error::Schema(format!("stored id {text:?}: {e}")))
}

/// A stored priority.
pub fn priority(n: i64) -> Result<Priority> {
    i16::try_from(n)
        .map(Priority)
        .map_err(|_| Error::Schema(format!("stored priority {n} is out of range")))
}

/// A stored 32-bit count.
pub fn int(n: i64, what: &str) -> Result<i32> {
    i32::try_from(n).map_err(|_| Error::Schema(format!("stored {what} {n} is out of range")))
}

/// Reads one column, mapping the driver's error.
pub fn col<T: rusqlite::types::FromSql>(row: &Row<'_>, i: usize) -> Result<T> {
    row.get(i).map_err(Error::database)
}

/// Reads a row of `job_get.sql` / `job_search.sql`: in a listing, an
/// `args` or `meta` left out is NULL, and the last two columns say their sizes.
pub fn job_record(row: &Row<'_>) -> Result<JobRecord> {
    let state: String = col(row, 4)?;
    let errors: String = col(row, 17)?;
    let errors: Vec<AttemptError> = serde_json::from_str(&errors)
        .map_err(|e| Error::Schema(format!("stored error history: {e}")))?;
    let node: Option<String> = col(row, 11)?;
    Ok(JobRecord {
        id: uuid(&col::<String>(row, 0)?)?,
        queue: col(row, 1)?,
        kind: col(row, 2)?,
        args: json_or_null(col(row, 3)?)?,
        state: state.parse()?,
        priority: priority(col(row, 5)?)?,
        run_at: time(col(row, 6)?)?,
        attempt: int(col(row, 7)?, "attempt")?,
        uncounted: int(col(row, 8)?, "uncounted")?,
        max_attempts: int(col(row, 9)?, "max_attempts")?,
        timeout_ms: int(col(row, 10)?, "timeout_ms")?,
        node_id: node.as_deref().map(uuid).transpose()?,
        lease_expires_at: opt_time(col(row, 12)?)?,
        created_at: time(col(row, 13)?)?,
        attempted_at: opt_time(col(row, 14)?)?,
        finished_at: opt_time(col(row, 15)?)?,
        duration_ms: col(row, 16)?,
        errors,
        group: col(row, 18)?,
        unique_key: col(row, 19)?,
        meta: json_or_null(col(row, 20)?)?,
        args_bytes: JobRecord::left_out_size(col(row, 21)?)?,
        meta_bytes: JobRecord::left_out_size(col(row, 22)?)?,
    })
}

/// A stored JSON value, or `null` for one a listing left out (NULL).
fn json_or_null(text: Option<String>) -> Result<serde_json::Value> {
    Ok(match text {
        Some(text) => serde_json::from_str(&text)?,
        None => serde_json::Value::Null,
    })
}

/// One row of an operator's listing (nodes, periodic jobs), or `None` when it cannot be
/// read (written by hand, an instant beyond what hopper reads): that row is left out and
/// said at most once a minute, so that one row never hides the others.
pub fn listed<T>(what: &str, row: Result<T>) -> Option<T> {
    static UNREADABLE: LogThrottle = LogThrottle::new(std::time::Duration::from_secs(60));
    match row {
        Ok(value) => Some(value),
        Err(e) => {
            if let Some(held_back) = UNREADABLE.check() {
                tracing::error!(error = %e, held_back, "a {what} row cannot be read; left out of the list");
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_at_microsecond_precision() -> Result<()> {
        let at = DateTime::parse_from_rfc3339("2026-03-04T05:06:07.123456789Z")
            .map_err(|e| Error::InvalidInput(e.to_string()))?
            .with_timezone(&Utc);
        let stored = micros(at);
        assert_eq!(time(stored)?, truncate(at));
        assert_eq!(rfc3339(truncate(at)), "2026-03-04T05:06:07.123456Z");
        Ok(())
    }

    #[test]
    fn the_smallest_uuid_v7_of_a_millisecond_bounds_its_ids() {
        let id = Uuid::now_v7();
        let text = id.hyphenated().to_string();
        let ms = i64::from_str_radix(&id.simple().to_string()[..12], 16).unwrap_or(0);
        assert!(smallest_uuid_v7(ms * 1000) <= text);
        assert!(smallest_uuid_v7((ms + 1) * 1000) > text);
        assert_eq!(smallest_uuid_v7(0), "00000000-0000-0000-0000-000000000000");
    }

    #[test]
    fn huge_delays_are_capped() {
        assert_eq!(delay_us(Duration::from_millis(5)), 5_000);
        assert_eq!(delay_us(Duration::MAX), MAX_DELAY_US);
        assert!(
            micros(Utc::now())
                .checked_add(delay_us(Duration::MAX))
                .is_some()
        );
    }
}
