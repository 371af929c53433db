//! Rows hopper cannot read, and what becomes of them.
//!
//! STRICT tables and CHECK constraints keep most garbage out, but a row may still hold
//! what hopper's types cannot decode: an instant beyond what chrono reads (an integer of
//! microseconds near `i64::MAX`), a count beyond 32 bits, arguments nested deeper than
//! serde reads, an error history of the wrong shape, or anything at all written with
//! `PRAGMA ignore_check_constraints`. Such a row must never stop anything else, so every
//! path that reads jobs decodes them one by one and hands the rows that fail to
//! [`quarantine`]: they are moved to `failed`, the decode error appended to their error
//! history and the unreadable columns replaced (`job_quarantine.sql`), so that they can
//! be read, shown and retried by hand from then on.
//!
//! - A claim keeps the jobs it could read and moves the others in its own transaction.
//! - The promoter, when the next due time cannot be read, moves the scheduled jobs whose
//!   `run_at` lies outside the range of `hopper_core::limits` and carries on.
//! - Listing, showing and searching move the rows they could not read, then read them
//!   again.
//!
//! The PostgreSQL backend does the same (its `poison.rs`).

use hopper_core::limits::{MAX_INSTANT_MICROS, MIN_INSTANT_MICROS};
use hopper_core::{AttemptError, Error, Result};
use rusqlite::{Connection, OptionalExtension, Row, named_params};

use crate::error::map_sqlite;
use crate::rows::col;
use crate::sql::Queries;

/// A job whose row could not be read, and why.
#[derive(Debug, Clone)]
pub struct Poisoned {
    /// The job's id as stored (it may itself be what could not be read).
    pub id: String,
    /// The decode error, as its error history will show it.
    pub reason: String,
}

impl Poisoned {
    /// The job of `row` (its id in column `id_column`), which failed to decode with `error`.
    pub fn of(row: &Row<'_>, id_column: usize, error: &Error) -> Result<Self> {
        Ok(Poisoned {
            id: col(row, id_column)?,
            reason: format!(
                "the job's row could not be read, so what did not read was replaced and, \
                 unless the job had finished, it was failed: {error}"
            ),
        })
    }
}

/// A row read as `T`, or the job that could not be.
pub type Decoded<T> = std::result::Result<T, Poisoned>;

/// Decodes `row` with `read`; a row that fails is answered as [`Poisoned`] rather than as
/// an error, so that the caller can go on with the others.
pub fn decode<T>(
    row: &Row<'_>,
    id_column: usize,
    read: impl FnOnce(&Row<'_>) -> Result<T>,
) -> Result<Decoded<T>> {
    match read(row) {
        Ok(value) => Ok(Ok(value)),
        Err(e) => Ok(Err(Poisoned::of(row, id_column, &e)?)),
    }
}

/// Moves `jobs` to `failed` with their reasons, inside the caller's write transaction
/// (`job_quarantine.sql`); answers how many rows were moved. `now` is in microseconds,
/// `now_text` the same instant as RFC 3339 for the error history.
pub fn quarantine(
    conn: &Connection,
    q: &Queries,
    jobs: &[Poisoned],
    now: i64,
    now_text: &str,
) -> Result<u64> {
    let mut moved = 0u64;
    for job in jobs {
        let stored: Option<(String, String, String)> = conn
            .prepare_cached(&q.job_quarantine[0])
            .and_then(|mut s| {
                s.query_row(named_params! { ":id": job.id }, |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .optional()
            })
            .map_err(map_sqlite)?;
        let Some((args, errors, meta)) = stored else {
            continue;
        };
        let args_ok = serde_json::from_str::<serde_json::Value>(&args).is_ok();
        let meta_ok = serde_json::from_str::<serde_json::Value>(&meta).is_ok();
        let errors_ok = serde_json::from_str::<Vec<AttemptError>>(&errors).is_ok();
        let changed = conn
            .prepare_cached(&q.job_quarantine[1])
            .and_then(|mut s| {
                s.execute(named_params! {
                    ":id": job.id,
                    ":reason": job.reason,
                    ":now": now,
                    ":now_text": now_text,
                    ":min_us": MIN_INSTANT_MICROS,
                    ":max_us": MAX_INSTANT_MICROS,
                    ":args_ok": args_ok,
                    ":meta_ok": meta_ok,
                    ":errors_ok": errors_ok,
                })
            })
            .map_err(map_sqlite)? as u64;
        if changed > 0 {
            tracing::error!(job = %job.id, reason = %job.reason, "moved an unreadable job to failed");
        }
        moved += changed;
    }
    Ok(moved)
}

/// Whether a stored instant lies in the range hopper reads and writes.
pub fn readable_instant(us: i64) -> bool {
    (MIN_INSTANT_MICROS..=MAX_INSTANT_MICROS).contains(&us)
}

/// Moves the scheduled jobs whose `run_at` lies outside the range of `hopper_core::limits`
/// (the promoter could not read its next due time), inside the caller's write
/// transaction; answers how many were moved.
pub fn quarantine_unreadable_scheduled(
    conn: &Connection,
    q: &Queries,
    now: i64,
    now_text: &str,
) -> Result<u64> {
    let jobs = conn
        .prepare_cached(&q.job_unreadable_scheduled[0])
        .and_then(|mut s| {
            s.query_map(
                named_params! { ":min_us": MIN_INSTANT_MICROS, ":max_us": MAX_INSTANT_MICROS },
                |r| {
                    let run_at: i64 = r.get(1)?;
                    Ok(Poisoned {
                        id: r.get(0)?,
                        reason: format!(
                            "the job's run_at ({run_at} µs since 1970) could not be read \
                             (outside the range hopper reads), so it was failed"
                        ),
                    })
                },
            )?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .map_err(map_sqlite)?;
    quarantine(conn, q, &jobs, now, now_text)
}
