//! Reading rows into hopper's types.

use hopper_core::log_limit::LogThrottle;
use hopper_core::{AttemptError, Error, JobRecord, Lease, Priority, Result};
use tokio_postgres::Row;

/// The column of a job's error history in `job_get.sql`'s rows.
const ERRORS_COLUMN: usize = 17;

/// The leases of `rows` whose first two columns are a job id and an attempt.
pub fn leases(rows: &[Row]) -> Result<Vec<Lease>> {
    rows.iter()
        .map(|r| {
            Ok(Lease {
                job_id: r.try_get(0).map_err(Error::database)?,
                attempt: r.try_get(1).map_err(Error::database)?,
            })
        })
        .collect()
}

/// Reads a row of `job_get.sql` / `job_search.sql`: `args` and `meta` as
/// JSON text; in a listing, one left out is NULL, and the last two columns say their sizes.
pub fn job_record(row: &Row) -> Result<JobRecord> {
    let state: String = row.try_get(4).map_err(Error::database)?;
    let errors: serde_json::Value = row.try_get(ERRORS_COLUMN).map_err(Error::database)?;
    let errors: Vec<AttemptError> = serde_json::from_value(errors)
        .map_err(|e| Error::Schema(format!("stored error history: {e}")))?;
    Ok(JobRecord {
        id: row.try_get(0).map_err(Error::database)?,
        queue: row.try_get(1).map_err(Error::database)?,
        kind: row.try_get(2).map_err(Error::database)?,
        args: json_text(row, 3)?,
        state: state.parse()?,
        priority: Priority(row.try_get(5).map_err(Error::database)?),
        run_at: row.try_get(6).map_err(Error::database)?,
        attempt: row.try_get(7).map_err(Error::database)?,
        uncounted: row.try_get(8).map_err(Error::database)?,
        max_attempts: row.try_get(9).map_err(Error::database)?,
        timeout_ms: row.try_get(10).map_err(Error::database)?,
        node_id: row.try_get(11).map_err(Error::database)?,
        lease_expires_at: row.try_get(12).map_err(Error::database)?,
        created_at: row.try_get(13).map_err(Error::database)?,
        attempted_at: row.try_get(14).map_err(Error::database)?,
        finished_at: row.try_get(15).map_err(Error::database)?,
        duration_ms: row.try_get(16).map_err(Error::database)?,
        errors,
        group: row.try_get(18).map_err(Error::database)?,
        unique_key: row.try_get(19).map_err(Error::database)?,
        meta: json_text(row, 20)?,
        args_bytes: JobRecord::left_out_size(row.try_get(21).map_err(Error::database)?)?,
        meta_bytes: JobRecord::left_out_size(row.try_get(22).map_err(Error::database)?)?,
    })
}

/// A JSON value the query read as text (`args::text`), or `null` for one a listing left
/// out (NULL).
fn json_text(row: &Row, column: usize) -> Result<serde_json::Value> {
    let text: Option<&str> = row.try_get(column).map_err(Error::database)?;
    Ok(match text {
        Some(text) => serde_json::from_str(text)?,
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
                tracing::error!(error = %e.with_causes(), held_back, "a {what} row cannot be read; left out of the list");
            }
            None
        }
    }
}
