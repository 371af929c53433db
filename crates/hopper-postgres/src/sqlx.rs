//! Enqueueing and completing jobs on the application's sqlx connection or transaction
//! (the `sqlx` feature): the same statements and rules as the tokio-postgres `_in`
//! methods, bound through sqlx (`conn.rs`).
//!
//! Every method takes `&mut sqlx::PgConnection`: pass `&mut *tx` for a
//! `sqlx::Transaction<'_, sqlx::Postgres>` (the job commits or rolls back with it), or
//! `&mut *conn` for a pooled connection (autocommit). Behind a transaction pooler
//! ([`crate::Pooler::Transaction`]) the statements go unnamed, as sqlx's `persistent(false)`.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use hopper_core::{Error, InsertOutcome, JobArgs, JobId, Lease, NewJob, Result};
use sqlx_core::connection::Connection;
use sqlx_core::query::{Query, query};
use sqlx_core::row::Row;
use sqlx_core::types::Json;
use sqlx_postgres::{PgArguments, PgConnection, Postgres};

use crate::PgBackend;
use crate::conn::{Columns, Conn, Holder};
use crate::error::{classify, is_stale_statement, job_id_taken};

/// hopper's transactional operations on sqlx connections, from [`PgBackend::sqlx`].
#[derive(Debug, Clone, Copy)]
pub struct SqlxJobs<'a> {
    backend: &'a PgBackend,
}

impl PgBackend {
    /// Enqueueing and completing inside the application's sqlx transactions.
    ///
    /// ```no_run
    /// # async fn run(hopper: &hopper_postgres::PgBackend, pool: &sqlx_postgres::PgPool) -> Result<(), Box<dyn std::error::Error>> {
    /// let mut tx = pool.begin().await?;
    /// // … the application's own writes on `&mut *tx` …
    /// let job = hopper_core::NewJob::new("send_email", serde_json::json!({"to": "ada@example.com"}));
    /// hopper.sqlx().insert(&mut tx, &job).await?;
    /// tx.commit().await?; // the job exists from here on, with the writes
    /// # Ok(()) }
    /// ```
    pub fn sqlx(&self) -> SqlxJobs<'_> {
        SqlxJobs { backend: self }
    }
}

impl SqlxJobs<'_> {
    /// Enqueues typed `args` with default options on `conn`: inside a transaction, the job
    /// exists only if it commits. Returns the job's id.
    pub async fn enqueue<A: JobArgs>(&self, conn: &mut PgConnection, args: &A) -> Result<JobId> {
        let job = NewJob::of(args)?;
        self.insert(conn, &job).await?;
        Ok(job.id)
    }

    /// Inserts one job built with [`NewJob`] on `conn`.
    pub async fn insert(&self, conn: &mut PgConnection, job: &NewJob) -> Result<()> {
        self.upsert(conn, job).await.map(|_| ())
    }

    /// Inserts one job on `conn`, honouring its group and unique key, and says what became
    /// of it (see [`InsertOutcome`]).
    pub async fn upsert(&self, conn: &mut PgConnection, job: &NewJob) -> Result<InsertOutcome> {
        self.backend.upsert_on(&mut self.conn(conn), job).await
    }

    /// Inserts many jobs on `conn`, all or nothing: in a transaction of their own on a
    /// plain connection, in a savepoint inside the caller's transaction.
    pub async fn insert_many(&self, conn: &mut PgConnection, jobs: &[NewJob]) -> Result<()> {
        self.upsert_many(conn, jobs).await.map(|_| ())
    }

    /// [`SqlxJobs::insert_many`], saying what became of each job (in order). One `INSERT
    /// … SELECT unnest(…)`, as behind a transaction pooler: sqlx has no binary COPY of
    /// typed rows.
    pub async fn upsert_many(
        &self,
        conn: &mut PgConnection,
        jobs: &[NewJob],
    ) -> Result<Vec<InsertOutcome>> {
        self.backend.refresh_settings().await?;
        let mut tx = conn.begin().await.map_err(map_sqlx)?;
        let mut inner = self.conn(&mut tx);
        self.backend.prepare_many(&mut inner, jobs).await?;
        let outcomes = self
            .backend
            .insert_rest(&mut inner, jobs, |_| false)
            .await?;
        tx.commit().await.map_err(map_sqlx)?;
        Ok(outcomes)
    }

    /// Completes the attempt `lease` on `conn`, so the job's completion and the handler's
    /// writes commit or roll back together. Fails with [`Error::LeaseLost`] (and changes
    /// nothing) if the lease is no longer current.
    pub async fn complete(
        &self,
        conn: &mut PgConnection,
        lease: Lease,
        duration_ms: i64,
    ) -> Result<()> {
        self.backend
            .complete_on(&mut self.conn(conn), lease, duration_ms)
            .await
    }

    fn conn<'c>(&'c self, conn: &'c mut PgConnection) -> Sqlx<'c> {
        Sqlx {
            backend: self.backend,
            conn,
        }
    }
}

/// A sqlx connection of the caller's ([`Conn`]).
struct Sqlx<'a> {
    backend: &'a PgBackend,
    conn: &'a mut PgConnection,
}

impl Sqlx<'_> {
    /// `result` as hopper's error, after this connection forgot the statements sqlx cached
    /// on it when the server refused one as stale (`error.rs`: a column it returns changed
    /// type, or a new server session behind a pooler), so that a retry prepares it again.
    async fn said<T>(&mut self, result: std::result::Result<T, sqlx_core::Error>) -> Result<T> {
        if let Err(e) = &result
            && is_stale(e)
        {
            // sqlx empties its cache as it writes the closes, before it waits for the
            // server: a failed wait still leaves them forgotten. The call's own error is
            // the one to return.
            let _ = self.conn.clear_cached_statements().await;
        }
        result.map_err(map_sqlx)
    }

    /// `sql` as a sqlx query, named (cached per connection) unless a transaction pooler
    /// stands between hopper and PostgreSQL.
    fn query<'q>(&self, sql: &'q str) -> Query<'q, Postgres, PgArguments> {
        query(sql).persistent(!self.backend.pooler().unnamed())
    }
}

/// `query` with `job`'s columns bound as `$1` to `$8`, in the order of `job_insert.sql`
/// and `job_insert_full.sql`: id, queue, kind, args, priority, run_at, max_attempts,
/// timeout_ms.
fn bind_job<'q>(
    query: Query<'q, Postgres, PgArguments>,
    job: &'q NewJob,
) -> Query<'q, Postgres, PgArguments> {
    query
        .bind(job.id)
        .bind(&job.queue)
        .bind(&job.kind)
        .bind(&job.args)
        .bind(job.priority.0)
        .bind(job.run_at)
        .bind(job.max_attempts)
        .bind(job.timeout_ms())
}

impl Conn for Sqlx<'_> {
    async fn mark_grouped(&mut self, queues: &[&str]) -> Result<()> {
        let sql = &self.backend.inner.queries.queue_mark_grouped.sql;
        let done = self.query(sql).bind(queues).execute(&mut *self.conn).await;
        self.said(done).await?;
        Ok(())
    }

    async fn insert_plain(&mut self, job: &NewJob) -> Result<()> {
        let sql = &self.backend.inner.queries.job_insert.sql;
        let done = bind_job(self.query(sql), job)
            .bind(self.backend.inner.clock.now())
            .bind(Json(&job.meta))
            .execute(&mut *self.conn)
            .await;
        self.said(done).await?;
        Ok(())
    }

    async fn insert_full(
        &mut self,
        job: &NewJob,
        now: Option<DateTime<Utc>>,
        window: Option<DateTime<Utc>>,
    ) -> Result<bool> {
        let sql = &self.backend.inner.queries.job_insert_full.sql;
        let row = bind_job(self.query(sql), job)
            .bind(now)
            .bind(&job.group)
            .bind(&job.unique_key)
            .bind(window)
            .bind(Json(&job.meta))
            .bind(window.and_then(|start| job.unique_window_end(start)))
            .fetch_one(&mut *self.conn)
            .await;
        let row = self.said(row).await?;
        Ok(row.try_get::<i64, _>(0).map_err(Error::database)? == 1)
    }

    async fn insert_many_full(&mut self, c: &Columns<'_>) -> Result<HashSet<JobId>> {
        let sql = &self.backend.inner.queries.job_insert_many_full.sql;
        let rows = self
            .query(sql)
            .bind(&c.ids)
            .bind(&c.queues)
            .bind(&c.kinds)
            .bind(&c.args)
            .bind(&c.priorities)
            .bind(&c.run_ats)
            .bind(&c.attempts)
            .bind(&c.timeouts)
            .bind(&c.groups)
            .bind(&c.keys)
            .bind(&c.windows)
            .bind(c.now)
            .bind(c.metas.iter().map(|m| Json(*m)).collect::<Vec<_>>())
            .bind(&c.window_ends)
            .fetch_all(&mut *self.conn)
            .await;
        let rows = self.said(rows).await?;
        rows.iter()
            .map(|r| r.try_get(0).map_err(Error::database))
            .collect()
    }

    async fn unique_holder(
        &mut self,
        job: &NewJob,
        window: Option<DateTime<Utc>>,
    ) -> Result<Option<Holder>> {
        let sql = &self.backend.inner.queries.job_unique_holder.sql;
        let row = self
            .query(sql)
            .bind(&job.unique_key)
            .bind(window)
            .bind(job.id)
            .fetch_optional(&mut *self.conn)
            .await;
        let row = self.said(row).await?;
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
        let sql = &self.backend.inner.queries.job_replace.sql;
        let replaced = self
            .query(sql)
            .bind(holder)
            .bind(&job.kind)
            .bind(&job.args)
            .bind(job.priority.0)
            .bind(job.run_at)
            .bind(job.max_attempts)
            .bind(job.timeout_ms())
            .bind(&job.group)
            .bind(now)
            .bind(Json(&job.meta))
            .fetch_optional(&mut *self.conn)
            .await;
        let replaced = self.said(replaced).await?;
        Ok(replaced.is_some())
    }

    async fn complete(
        &mut self,
        lease: Lease,
        duration_ms: i64,
        now: Option<DateTime<Utc>>,
    ) -> Result<bool> {
        let sql = &self.backend.inner.queries.job_complete_many.sql;
        let rows = self
            .query(sql)
            .bind(vec![lease.job_id])
            .bind(vec![lease.attempt])
            .bind(vec![duration_ms])
            .bind(now)
            .fetch_all(&mut *self.conn)
            .await;
        let rows = self.said(rows).await?;
        Ok(!rows.is_empty())
    }
}

/// Turns a sqlx error into hopper's, by the same SQLSTATE rules as [`crate::map_pg`].
fn map_sqlx(e: sqlx_core::Error) -> Error {
    if let Some(db) = e.as_database_error()
        && let Some(code) = db.code()
    {
        let detail = db
            .try_downcast_ref::<sqlx_postgres::PgDatabaseError>()
            .and_then(|pg| pg.detail());
        if let Some(taken) = job_id_taken(&code, db.constraint(), detail) {
            return taken;
        }
        if let Some(mapped) = classify(&code, db.message(), routine(db)) {
            return mapped;
        }
    }
    Error::database(e)
}

/// [`crate::error::is_stale_statement`] for a sqlx error.
fn is_stale(e: &sqlx_core::Error) -> bool {
    e.as_database_error().is_some_and(|db| {
        db.code()
            .is_some_and(|code| is_stale_statement(&code, db.message(), routine(db)))
    })
}

/// The server function that raised a PostgreSQL error, when the server said.
fn routine(db: &dyn sqlx_core::error::DatabaseError) -> Option<&str> {
    db.try_downcast_ref::<sqlx_postgres::PgDatabaseError>()
        .and_then(|pg| pg.routine())
}
