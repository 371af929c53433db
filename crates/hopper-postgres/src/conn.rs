//! The statements that run on the caller's connection: enqueueing and completing inside
//! the application's own transaction.
//!
//! They run through one of two drivers, tokio-postgres ([`Tokio`], any `GenericClient`)
//! or sqlx (`sqlx.rs`), which implement [`Conn`]: each binds the arguments and runs the
//! statement of `src/queries/` it is named after, nothing more. The rules around them
//! (validation, groups, unique policies, lease fencing) are written once, in `upsert.rs`
//! and `lib.rs`, over [`Conn`].

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use hopper_core::{Error, JobId, Lease, NewJob, Result};
use tokio_postgres::GenericClient;
use tokio_postgres::types::{Json, ToSql};

use crate::PgBackend;
use crate::error::map_pg;

/// The statements of an insert or a completion, on one connection.
pub(crate) trait Conn {
    /// `queue_mark_grouped.sql`.
    async fn mark_grouped(&mut self, queues: &[&str]) -> Result<()>;

    /// `job_insert.sql`: a job that needs no upsert.
    async fn insert_plain(&mut self, job: &NewJob) -> Result<()>;

    /// `job_insert_full.sql`: true if the job was inserted.
    async fn insert_full(
        &mut self,
        job: &NewJob,
        now: Option<DateTime<Utc>>,
        window: Option<DateTime<Utc>>,
    ) -> Result<bool>;

    /// `job_insert_many_full.sql`: the ids inserted.
    async fn insert_many_full(&mut self, columns: &Columns<'_>) -> Result<HashSet<JobId>>;

    /// `job_unique_holder.sql`: what keeps `job` (its key and id) from being inserted: the
    /// job holding its unique key, else the job of its id; its state, and whether it
    /// holds the key.
    async fn unique_holder(
        &mut self,
        job: &NewJob,
        window: Option<DateTime<Utc>>,
    ) -> Result<Option<Holder>>;

    /// `job_replace.sql`: true if the holder was still waiting and took `job`'s fields.
    async fn replace(
        &mut self,
        holder: JobId,
        job: &NewJob,
        now: Option<DateTime<Utc>>,
    ) -> Result<bool>;

    /// `job_complete_many.sql` for one lease: true if the lease was current.
    async fn complete(
        &mut self,
        lease: Lease,
        duration_ms: i64,
        now: Option<DateTime<Utc>>,
    ) -> Result<bool>;
}

/// A row of `job_unique_holder.sql`.
pub(crate) struct Holder {
    /// The job's id.
    pub id: JobId,
    /// Its state.
    pub state: String,
    /// True when it holds the unique key; false when it only has the id asked for.
    pub holds_key: bool,
}

/// The arguments of `job_insert_many_full.sql`, one array per column.
pub(crate) struct Columns<'a> {
    pub ids: Vec<JobId>,
    pub queues: Vec<&'a str>,
    pub kinds: Vec<&'a str>,
    pub args: Vec<&'a serde_json::Value>,
    pub priorities: Vec<i16>,
    pub run_ats: Vec<Option<DateTime<Utc>>>,
    pub attempts: Vec<i32>,
    pub timeouts: Vec<i32>,
    pub groups: Vec<Option<&'a str>>,
    pub keys: Vec<Option<&'a str>>,
    pub windows: Vec<Option<DateTime<Utc>>>,
    pub window_ends: Vec<Option<DateTime<Utc>>>,
    pub metas: Vec<&'a serde_json::Map<String, serde_json::Value>>,
    /// "Now" by the injected clock (`None`: the database's).
    pub now: Option<DateTime<Utc>>,
}

impl<'a> Columns<'a> {
    /// The columns of `jobs`; `local_now` opens the unique windows of jobs due now.
    pub fn of(jobs: &[&'a NewJob], local_now: DateTime<Utc>, now: Option<DateTime<Utc>>) -> Self {
        let windows: Vec<Option<DateTime<Utc>>> = jobs
            .iter()
            .map(|j| j.unique_window_start(j.run_at.unwrap_or(local_now)))
            .collect();
        let window_ends = jobs
            .iter()
            .zip(&windows)
            .map(|(j, start)| start.and_then(|s| j.unique_window_end(s)))
            .collect();
        Columns {
            ids: jobs.iter().map(|j| j.id).collect(),
            queues: jobs.iter().map(|j| j.queue.as_str()).collect(),
            kinds: jobs.iter().map(|j| j.kind.as_str()).collect(),
            args: jobs.iter().map(|j| &j.args).collect(),
            priorities: jobs.iter().map(|j| j.priority.0).collect(),
            run_ats: jobs.iter().map(|j| j.run_at).collect(),
            attempts: jobs.iter().map(|j| j.max_attempts).collect(),
            timeouts: jobs.iter().map(|j| j.timeout_ms()).collect(),
            groups: jobs.iter().map(|j| j.group.as_deref()).collect(),
            keys: jobs.iter().map(|j| j.unique_key.as_deref()).collect(),
            windows,
            window_ends,
            metas: jobs.iter().map(|j| &j.meta).collect(),
            now,
        }
    }
}

/// `job`'s columns as `$1` to `$8` of `job_insert.sql` and `job_insert_full.sql`: id,
/// queue, kind, args, priority, run_at, max_attempts and `timeout_ms` (the caller's
/// `job.timeout_ms()`, which must outlive the statement).
pub(crate) fn job_params<'a>(job: &'a NewJob, timeout_ms: &'a i32) -> [&'a (dyn ToSql + Sync); 8] {
    [
        &job.id,
        &job.queue,
        &job.kind,
        &job.args,
        &job.priority.0,
        &job.run_at,
        &job.max_attempts,
        timeout_ms,
    ]
}

/// A tokio-postgres client, transaction or pooled connection of the caller's.
pub(crate) struct Tokio<'a, C> {
    pub backend: &'a PgBackend,
    pub client: &'a C,
}

impl<C: GenericClient + Sync> Conn for Tokio<'_, C> {
    async fn mark_grouped(&mut self, queues: &[&str]) -> Result<()> {
        let query = &self.backend.inner.queries.queue_mark_grouped;
        self.backend
            .text(query)
            .execute(self.client, &[&queues])
            .await
            .map_err(map_pg)?;
        Ok(())
    }

    async fn insert_plain(&mut self, job: &NewJob) -> Result<()> {
        let insert = self.backend.text(&self.backend.inner.queries.job_insert);
        self.backend.insert_plain(self.client, &insert, job).await
    }

    async fn insert_full(
        &mut self,
        job: &NewJob,
        now: Option<DateTime<Utc>>,
        window: Option<DateTime<Utc>>,
    ) -> Result<bool> {
        let timeout_ms = job.timeout_ms();
        let [id, queue, kind, args, priority, run_at, attempts, timeout] =
            job_params(job, &timeout_ms);
        let row = self
            .backend
            .text(&self.backend.inner.queries.job_insert_full)
            .query_one(
                self.client,
                &[
                    id,
                    queue,
                    kind,
                    args,
                    priority,
                    run_at,
                    attempts,
                    timeout,
                    &now,
                    &job.group,
                    &job.unique_key,
                    &window,
                    &Json(&job.meta),
                    &window.and_then(|start| job.unique_window_end(start)),
                ],
            )
            .await
            .map_err(map_pg)?;
        Ok(row.try_get::<_, i64>(0).map_err(Error::database)? == 1)
    }

    async fn insert_many_full(&mut self, c: &Columns<'_>) -> Result<HashSet<JobId>> {
        let rows = self
            .backend
            .text(&self.backend.inner.queries.job_insert_many_full)
            .query(
                self.client,
                &[
                    &c.ids,
                    &c.queues,
                    &c.kinds,
                    &c.args,
                    &c.priorities,
                    &c.run_ats,
                    &c.attempts,
                    &c.timeouts,
                    &c.groups,
                    &c.keys,
                    &c.windows,
                    &c.now,
                    &c.metas.iter().map(|m| Json(*m)).collect::<Vec<_>>(),
                    &c.window_ends,
                ],
            )
            .await
            .map_err(map_pg)?;
        rows.iter()
            .map(|r| r.try_get(0).map_err(Error::database))
            .collect()
    }

    async fn unique_holder(
        &mut self,
        job: &NewJob,
        window: Option<DateTime<Utc>>,
    ) -> Result<Option<Holder>> {
        let row = self
            .backend
            .text(&self.backend.inner.queries.job_unique_holder)
            .query_opt(self.client, &[&job.unique_key, &window, &job.id])
            .await
            .map_err(map_pg)?;
        row.map(|row| {
            Ok(Holder {
                id: row.try_get(0).map_err(Error::database)?,
                state: row.try_get(1).map_err(Error::database)?,
                holds_key: row.try_get(2).map_err(Error::database)?,
            })
        })
        .transpose()
    }

    async fn replace(
        &mut self,
        holder: JobId,
        job: &NewJob,
        now: Option<DateTime<Utc>>,
    ) -> Result<bool> {
        let replaced = self
            .backend
            .text(&self.backend.inner.queries.job_replace)
            .query_opt(
                self.client,
                &[
                    &holder,
                    &job.kind,
                    &job.args,
                    &job.priority.0,
                    &job.run_at,
                    &job.max_attempts,
                    &job.timeout_ms(),
                    &job.group,
                    &now,
                    &Json(&job.meta),
                ],
            )
            .await
            .map_err(map_pg)?;
        Ok(replaced.is_some())
    }

    async fn complete(
        &mut self,
        lease: Lease,
        duration_ms: i64,
        now: Option<DateTime<Utc>>,
    ) -> Result<bool> {
        let rows = self
            .backend
            .text(&self.backend.inner.queries.job_complete_many)
            .query(
                self.client,
                &[
                    &vec![lease.job_id],
                    &vec![lease.attempt],
                    &vec![duration_ms],
                    &now,
                ],
            )
            .await
            .map_err(map_pg)?;
        Ok(!rows.is_empty())
    }
}
