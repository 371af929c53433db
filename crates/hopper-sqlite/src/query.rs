//! Statements shared by several methods: inserting jobs, reading one job, reading a page of
//! jobs.

use std::time::Duration;

use chrono::DateTime;
use hopper_core::{ClaimedJob, Error, JobId, JobRecord, Lease, NewJob, Result};
use rusqlite::{Connection, Row, ToSql, named_params};

use crate::error::map_sqlite;
use crate::poison::{self, Decoded};
use crate::rows::{self, col, micros};
use crate::sql::Queries;

/// Inserts validated jobs inside the caller's transaction with one prepared statement.
///
/// The statement's named parameters are resolved to positions once, not once per job:
/// binding by name costs more than the insert itself over a 100,000-job batch.
pub struct Inserter<'c> {
    statement: rusqlite::CachedStatement<'c>,
    /// Positions of the parameters, in the order of [`PARAMS`].
    at: [usize; 14],
}

/// The parameters of `job_insert.sql`.
const PARAMS: [&str; 14] = [
    ":id",
    ":queue",
    ":kind",
    ":args",
    ":priority",
    ":run_at",
    ":max_attempts",
    ":timeout_ms",
    ":now",
    ":group_key",
    ":unique_key",
    ":unique_window",
    ":meta",
    ":unique_until",
];

/// What became of one insert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// Written; `due` when it is `available` now.
    Yes {
        /// Available now (else scheduled).
        due: bool,
    },
    /// Nothing written: its id or unique key is taken.
    Taken,
}

impl<'c> Inserter<'c> {
    pub fn new(conn: &'c Connection, q: &Queries) -> Result<Self> {
        let statement = conn.prepare_cached(&q.job_insert[0]).map_err(map_sqlite)?;
        let mut at = [0usize; 14];
        for (slot, name) in at.iter_mut().zip(PARAMS) {
            *slot = statement
                .parameter_index(name)
                .map_err(map_sqlite)?
                .ok_or_else(|| Error::Schema(format!("job_insert.sql lacks {name}")))?;
        }
        Ok(Inserter { statement, at })
    }

    /// Inserts one job into `group` (its own, or '' in a grouped queue), with its unique
    /// key and the start of its unique window, if any (and the window's end).
    pub fn insert(
        &mut self,
        job: &NewJob,
        now: i64,
        group: Option<&str>,
        window: Option<i64>,
    ) -> Result<Inserted> {
        let run_at = job.run_at.map_or(now, micros);
        let args = serde_json::to_string(&job.args)?;
        let meta = serde_json::to_string(&job.meta)?;
        let mut id = uuid::Uuid::encode_buffer();
        let id = job.id.hyphenated().encode_lower(&mut id);
        let until = window
            .and_then(DateTime::from_timestamp_micros)
            .and_then(|start| job.unique_window_end(start))
            .map(micros);
        let values: [&dyn ToSql; 14] = [
            &&*id,
            &job.queue,
            &job.kind,
            &args,
            &job.priority.0,
            &run_at,
            &job.max_attempts,
            &job.timeout_ms(),
            &now,
            &group,
            &job.unique_key,
            &window,
            &meta,
            &until,
        ];
        for (at, value) in self.at.into_iter().zip(values) {
            self.statement
                .raw_bind_parameter(at, value)
                .map_err(map_sqlite)?;
        }
        match self.statement.raw_execute().map_err(map_sqlite)? {
            0 => Ok(Inserted::Taken),
            _ => Ok(Inserted::Yes { due: run_at <= now }),
        }
    }
}

/// Reads one job inside the caller's connection or transaction; a row that cannot be read
/// is an error.
pub fn get(conn: &Connection, q: &Queries, id: JobId) -> Result<Option<JobRecord>> {
    get_decoded(conn, q, id)?
        .map(|job| job.map_err(|p| Error::Schema(p.reason)))
        .transpose()
}

/// Reads one job; a row that cannot be read is answered as `Poisoned`.
pub fn get_decoded(
    conn: &Connection,
    q: &Queries,
    id: JobId,
) -> Result<Option<Decoded<JobRecord>>> {
    let mut statement = conn.prepare_cached(&q.job_get[0]).map_err(map_sqlite)?;
    let mut found = statement
        .query(named_params! { ":id": id.hyphenated().to_string() })
        .map_err(map_sqlite)?;
    match found.next().map_err(map_sqlite)? {
        Some(row) => poison::decode(row, 0, rows::job_record).map(Some),
        None => Ok(None),
    }
}

/// Runs a listing statement (`job_search.sql`) and reads its rows, each
/// on its own: a row that cannot be read is answered as `Poisoned`.
pub fn records(
    conn: &Connection,
    sql: &str,
    params: &[(&str, &dyn ToSql)],
) -> Result<Vec<Decoded<JobRecord>>> {
    let mut statement = conn.prepare_cached(sql).map_err(map_sqlite)?;
    let mut found = statement.query(params).map_err(map_sqlite)?;
    let mut jobs = Vec::new();
    while let Some(row) = found.next().map_err(map_sqlite)? {
        jobs.push(poison::decode(row, 0, rows::job_record)?);
    }
    Ok(jobs)
}

/// Reads a row returned by a claim (`job_claim.sql`, `job_claim_controlled.sql`).
/// Counts no claim could leave (written by hand) are an error
/// ([`hopper_core::lease::claimed_counts`]), so the caller fails the job as unreadable.
pub fn claimed_job(row: &Row<'_>) -> Result<ClaimedJob> {
    let timeout_ms: i64 = col(row, 8)?;
    let (attempt, counted_attempt) =
        hopper_core::lease::claimed_counts(col(row, 1)?, col(row, 6)?)?;
    Ok(ClaimedJob {
        lease: Lease {
            job_id: rows::uuid(&col::<String>(row, 0)?)?,
            attempt,
        },
        queue: col(row, 2)?,
        kind: col(row, 3)?,
        args: serde_json::from_str(&col::<String>(row, 4)?)?,
        priority: rows::priority(col(row, 5)?)?,
        counted_attempt,
        max_attempts: rows::int(col(row, 7)?, "max_attempts")?,
        timeout: Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0)),
        created_at: rows::time(col(row, 9)?)?,
        run_at: rows::time(col(row, 10)?)?,
        meta: serde_json::from_str(&col::<String>(row, 11)?)?,
    })
}
