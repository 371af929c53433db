//! Statements shared by several methods: inserting jobs, reading one job, reading a page of
//! jobs.

use hopper_core::{Error, JobId, JobRecord, NewJob, Result};
use rusqlite::{Connection, ToSql, named_params};

use crate::error::map_sqlite;
use crate::rows::{self, micros};
use crate::sql::Queries;

/// Inserts validated jobs inside the caller's transaction with one prepared statement.
///
/// The statement's named parameters are resolved to positions once, not once per job:
/// binding by name costs more than the insert itself over a 100,000-job batch.
pub struct Inserter<'c> {
    statement: rusqlite::CachedStatement<'c>,
    /// Positions of :id, :queue, :kind, :args, :priority, :run_at, :max_attempts,
    /// :timeout_ms, :now.
    at: [usize; 9],
}

impl<'c> Inserter<'c> {
    pub fn new(conn: &'c Connection, q: &Queries) -> Result<Self> {
        let statement = conn.prepare_cached(&q.job_insert[0]).map_err(map_sqlite)?;
        let mut at = [0usize; 9];
        let names = [
            ":id",
            ":queue",
            ":kind",
            ":args",
            ":priority",
            ":run_at",
            ":max_attempts",
            ":timeout_ms",
            ":now",
        ];
        for (slot, name) in at.iter_mut().zip(names) {
            *slot = statement
                .parameter_index(name)
                .map_err(map_sqlite)?
                .ok_or_else(|| Error::Schema(format!("job_insert.sql lacks {name}")))?;
        }
        Ok(Inserter { statement, at })
    }

    /// Inserts one job. Returns whether it is due now (and so `available`).
    pub fn insert(&mut self, job: &NewJob, now: i64) -> Result<bool> {
        let run_at = job.run_at.map_or(now, micros);
        let args = serde_json::to_string(&job.args)?;
        let mut id = uuid::Uuid::encode_buffer();
        let id = job.id.hyphenated().encode_lower(&mut id);
        let [
            a_id,
            a_queue,
            a_kind,
            a_args,
            a_priority,
            a_run_at,
            a_max,
            a_timeout,
            a_now,
        ] = self.at;
        let s = &mut self.statement;
        s.raw_bind_parameter(a_id, &*id).map_err(map_sqlite)?;
        s.raw_bind_parameter(a_queue, &job.queue)
            .map_err(map_sqlite)?;
        s.raw_bind_parameter(a_kind, &job.kind)
            .map_err(map_sqlite)?;
        s.raw_bind_parameter(a_args, &args).map_err(map_sqlite)?;
        s.raw_bind_parameter(a_priority, job.priority.0)
            .map_err(map_sqlite)?;
        s.raw_bind_parameter(a_run_at, run_at).map_err(map_sqlite)?;
        s.raw_bind_parameter(a_max, job.max_attempts)
            .map_err(map_sqlite)?;
        s.raw_bind_parameter(a_timeout, job.timeout_ms())
            .map_err(map_sqlite)?;
        s.raw_bind_parameter(a_now, now).map_err(map_sqlite)?;
        s.raw_execute().map_err(map_sqlite)?;
        Ok(run_at <= now)
    }
}

/// Reads one job inside the caller's connection or transaction.
pub fn get(conn: &Connection, q: &Queries, id: JobId) -> Result<Option<JobRecord>> {
    let mut statement = conn.prepare_cached(&q.job_get[0]).map_err(map_sqlite)?;
    let mut found = statement
        .query(named_params! { ":id": id.hyphenated().to_string() })
        .map_err(map_sqlite)?;
    match found.next().map_err(map_sqlite)? {
        Some(row) => rows::job_record(row).map(Some),
        None => Ok(None),
    }
}

/// Runs a listing statement (`job_list.sql`, `job_search.sql`) and reads its rows.
pub fn records(
    conn: &Connection,
    sql: &str,
    params: &[(&str, &dyn ToSql)],
) -> Result<Vec<JobRecord>> {
    let mut statement = conn.prepare_cached(sql).map_err(map_sqlite)?;
    let mut found = statement.query(params).map_err(map_sqlite)?;
    let mut jobs = Vec::new();
    while let Some(row) = found.next().map_err(map_sqlite)? {
        jobs.push(rows::job_record(row)?);
    }
    Ok(jobs)
}
