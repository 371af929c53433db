//! Per-job logs on PostgreSQL ([`LogStore`]): an attempt's lines appended to its row of
//! `job_logs`, and read back a page of attempts at a time.
//!
//! A store does not wait on a job row another transaction holds: the statement skips it
//! (`job_log_append.sql`). A shared writer's store ([`LogStore::job_log_append_shared`],
//! `hopper serve`'s one writer of every remote worker's lines) does not wait long on a log
//! row either: it waits at most 100 ms (`lock_wait!`, as the outcomes), then stores the same
//! entries with a statement that skips held log rows too
//! (`job_log_append_around_held.sql`), which costs more to plan and run and so is only the
//! second try, and waits, as stores did before, only on a lock of the whole table. Either
//! way an attempt whose row is held is left out, and the caller sends it again later.
//!
//! The bound is a session setting of a connection kept for shared writers (a pool of one,
//! opened at their first store), so that a store pays nothing for it: sent around each
//! store instead, the two settings cost log-heavy W3 about 18% (docs/benchmarks.md). Behind
//! a transaction pooler, where a session setting would stay with whichever server session
//! ran it, it is sent around each shared store, `SET LOCAL` in a transaction of the store's
//! own. A runtime's store, of one attempt's lines, waits on its own log row: the wait
//! stalls only that attempt's store, which the runtime bounds.

use async_trait::async_trait;
use hopper_core::job_log::{
    AttemptLog, JobLogAppend, LogLine, LogStore, MAX_ATTEMPT_LOG_BYTES, merge_appends,
    read_stored_lines,
};
use hopper_core::{Error, JobId, Lease, Result};
use tokio_postgres::Row;
use tokio_postgres::types::{Json, ToSql};

use crate::PgBackend;
use crate::error::{lock_not_granted, map_pg};
use crate::pooled::{TxConnection, bracketed};
use crate::rows::leases;
use crate::statement::Args;

/// The setup of the connection kept for shared writers: a bound on each wait for a row
/// lock (`lock_wait!`), past which a store goes around the held rows (hopper locks a log
/// row only for the moment of a store, so a longer wait is another transaction holding
/// it).
pub(crate) const SHARED_WRITER_SETUP: &str = concat!("SET lock_timeout = '", lock_wait!(), "'");

/// What is sent before a shared writer's store behind a transaction pooler: the same bound,
/// in a transaction of the store's own (ended by `COMMIT`, a rollback if the store failed).
const LOCK_BOUND_LOCAL: &str = concat!("BEGIN; SET LOCAL lock_timeout = '", lock_wait!(), "'");

#[async_trait]
impl LogStore for PgBackend {
    async fn job_log_append(&self, appends: &[JobLogAppend]) -> Result<Vec<Lease>> {
        self.append(appends, false).await
    }

    async fn job_log_append_shared(&self, appends: &[JobLogAppend]) -> Result<Vec<Lease>> {
        self.append(appends, true).await
    }

    async fn job_logs_page(&self, job: JobId, after: i32, limit: u32) -> Result<Vec<AttemptLog>> {
        let client = self.client().await?;
        let limit = i64::from(limit);
        let rows = self
            .text(&self.inner.queries.job_logs)
            .query(&**client, &[&job, &after, &limit])
            .await
            .map_err(map_pg)?;
        rows.iter()
            .map(|r| {
                let lines: serde_json::Value = r.try_get(1).map_err(Error::database)?;
                Ok(AttemptLog {
                    attempt: r.try_get(0).map_err(Error::database)?,
                    lines: read_stored_lines(lines),
                    dropped: r.try_get(2).map_err(Error::database)?,
                })
            })
            .collect()
    }
}

impl PgBackend {
    /// Stores `appends`, within the lock bound when `bounded` (see the module docs), and
    /// returns the attempts left out because their job or log row is held.
    async fn append(&self, appends: &[JobLogAppend], bounded: bool) -> Result<Vec<Lease>> {
        let merged = merge_appends(appends);
        if merged.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<JobId> = merged.iter().map(|m| m.lease.job_id).collect();
        let attempts: Vec<i32> = merged.iter().map(|m| m.lease.attempt).collect();
        let lines: Vec<Json<&Vec<LogLine>>> = merged.iter().map(|m| Json(&m.lines)).collect();
        let bytes: Vec<i32> = merged.iter().map(|m| m.bytes).collect();
        let dropped: Vec<i64> = merged.iter().map(|m| m.dropped).collect();
        let bound = i32::try_from(MAX_ATTEMPT_LOG_BYTES).unwrap_or(i32::MAX);
        let args: [&(dyn ToSql + Sync); 6] = [&ids, &attempts, &lines, &bytes, &dropped, &bound];
        // The connection kept for shared writers, bounded, or a pooled one (bounded around
        // the store behind a transaction pooler).
        let (object, bracket) = match (bounded, &self.inner.shared_writer) {
            (true, Some(pool)) => (self.pooled(pool).await?, false),
            (true, None) => (self.client().await?, true),
            (false, _) => (self.client().await?, false),
        };
        // Failed or cancelled midway (a caller's timeout while the store waits on a lock),
        // the connection is closed: put back, it would hold its next user behind the wait,
        // or inside the store's transaction.
        let client = TxConnection::new(object);
        // Prepared once per connection: every attempt that logs stores at least once. The
        // first preparation on a connection waits on a lock of the table too (an `ALTER
        // TABLE`, a `LOCK TABLE`), within the same bound.
        let prepared = self
            .inner
            .pooler
            .prepare(&client, &self.inner.queries.job_log_append)
            .await;
        let first = match prepared {
            Ok(statement) => {
                let run = statement.query(&***client, &args);
                match bracket {
                    true => bracketed(&client, (LOCK_BOUND_LOCAL, "COMMIT"), run).await?,
                    false => run.await,
                }
            }
            Err(e) => Err(e),
        };
        let stored = match first {
            Ok(rows) => rows,
            // Past the bound, or the pool's own (`PgOptions::lock_timeout`).
            Err(e) if lock_not_granted(&e) => {
                self.append_around_held(&client, &args, bounded).await?
            }
            Err(e) => {
                // The database answered the statement with an error (a trigger, a
                // constraint): the exchange is over and, outside a bracket's transaction,
                // the session is as it was. Put back, not closed: a writer whose stores
                // are refused one after the other would otherwise open a connection for
                // each (20 ms apiece with TLS).
                if !bracket && e.as_db_error().is_some() {
                    client.release();
                }
                return Err(map_pg(e));
            }
        };
        if stored.len() == merged.len() {
            client.release();
            return Ok(Vec::new());
        }
        // Some were not stored: their job or log row is held elsewhere, or the job is gone.
        // Which is which.
        let stored = leases(&stored)?;
        let (ids, attempts): (Vec<JobId>, Vec<i32>) = merged
            .iter()
            .map(|m| m.lease)
            .filter(|lease| !stored.contains(lease))
            .map(|lease| (lease.job_id, lease.attempt))
            .unzip();
        let held = self
            .text(&self.inner.queries.job_attempts_exist)
            .query(&***client, &[&ids, &attempts])
            .await
            .map_err(map_pg)?;
        client.release();
        leases(&held)
    }

    /// The second try of a store whose first timed out on a row lock: the statement that
    /// skips held log rows, sent as text (planned at each run: how best to find the log
    /// rows depends on the size of `job_logs`, which a cached plan would not follow). A
    /// shared writer's runs in a transaction whose lock bound is the pool's own (none
    /// unless [`crate::PgOptions::lock_timeout`] sets one), not the 100 ms of the first
    /// try: it skips held rows, so what it may still wait for is a lock on the table (an
    /// `ALTER TABLE`, a `LOCK TABLE`), which stalls every store alike, and waiting for it
    /// keeps their lines where failing would have the workers give them up after their
    /// retries. A runtime's store runs under the pool's bound as it is. One step after the
    /// other, as a statement sent as text is prepared first.
    async fn append_around_held(
        &self,
        client: &TxConnection,
        args: &Args<'_>,
        shared: bool,
    ) -> Result<Vec<Row>> {
        if shared {
            client
                .batch_execute(&self.inner.logs_around_held)
                .await
                .map_err(map_pg)?;
        }
        let rows = self
            .text(&self.inner.queries.job_log_append_around_held)
            .query(&****client, args)
            .await
            .map_err(map_pg)?;
        if shared {
            client.batch_execute("COMMIT").await.map_err(map_pg)?;
        }
        Ok(rows)
    }
}
