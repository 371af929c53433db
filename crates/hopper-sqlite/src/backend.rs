//! [`Backend`] for [`SqliteBackend`]: each method runs the `.sql` file of its name.
//!
//! Every write is one `BEGIN IMMEDIATE` transaction on the writer connection
//! ([`crate::pool`]); the wake-ups it causes are sent after it commits. "Now" is read from
//! the clock once per call and passed to the SQL as `:now` (microseconds) and, for the
//! error history, `:now_text`.

use std::collections::HashMap;

use async_trait::async_trait;
use hopper_core::backend::{
    AppliedMigration, Backend, ClaimParams, ClaimedJob, Finish, FinishResult, JobCancelParams,
    JobClearParams, JobDeleteParams, JobExtendManyParams, JobGetParams, JobListParams,
    JobRetryManyParams, JobRetryParams, JobSearchParams, MaintenanceStore, NodeDeregisterParams,
    NodeInfo, QueueStats, SchedulingStore, StatsStore, Wakeup, WakeupStream,
};
use hopper_core::log_limit::{LogThrottle, capped};
use hopper_core::policy::{self, JobAction};
use hopper_core::{
    CronEntry, Error, InsertOutcome, JobId, JobRecord, JobState, LISTED_VALUE_BYTES, Lease, NewJob,
    QueueSettings, QueueUpdate, Result,
};
use rusqlite::{OptionalExtension, named_params};

use crate::error::map_sqlite;
use crate::outcome::finish_one;
use crate::poison::{self, Decoded, Poisoned};
use crate::query::{claimed_job, get, get_decoded, records};
use crate::rows::{self, col, delay_us, micros, rfc3339};
use crate::{SqliteBackend, migrate, scheduling, wake};

/// Rows that stay unreadable once failed (an id that is no UUID) are left out of every
/// read; said at most once a minute, not at each read.
static UNREADABLE_LOGS: LogThrottle = LogThrottle::new(std::time::Duration::from_secs(60));

impl SqliteBackend {
    /// Inserts jobs in one transaction honouring their group and unique keys (the body of
    /// `job_insert`, `job_insert_many` and `job_upsert_many`: plain jobs take the same
    /// prepared statement, so they lose nothing to the extra columns).
    pub(crate) async fn upsert(&self, jobs: &[NewJob]) -> Result<Vec<InsertOutcome>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let inner = self.inner.clone();
        let now = self.now();
        let jobs = jobs.to_vec();
        let (outcomes, woken) = self
            .inner
            .pool
            .write(move |conn| {
                // Every job is checked before the transaction starts: one bad job writes
                // nothing, and the write lock is not held while checking.
                for job in &jobs {
                    job.validate()?;
                }
                let tx = conn
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                    .map_err(map_sqlite)?;
                let out = scheduling::upsert(&tx, &inner.queries, &jobs, now)?;
                tx.commit().map_err(map_sqlite)?;
                Ok(out)
            })
            .await?;
        self.wake_queues(&woken);
        Ok(outcomes)
    }

    /// Runs a one-job state change (`job_retry`, `job_cancel`): the statement returns the
    /// job's queue when it applied. Answers the job as it is now and that queue, or
    /// `NotFound`, or the `Conflict` of `action` in the job's state.
    async fn transition(
        &self,
        id: JobId,
        query: fn(&crate::sql::Queries) -> &String,
        action: JobAction,
    ) -> Result<(JobRecord, String)> {
        let inner = self.inner.clone();
        let now = micros(self.now());
        self.inner
            .pool
            .write_tx(move |tx| {
                let applied: Option<String> = tx
                    .prepare_cached(query(&inner.queries))
                    .and_then(|mut s| {
                        s.query_row(
                            named_params! { ":id": id.hyphenated().to_string(), ":now": now },
                            |r| r.get(0),
                        )
                        .optional()
                    })
                    .map_err(map_sqlite)?;
                let job = get(tx, &inner.queries, id)?
                    .ok_or_else(|| Error::NotFound(format!("job {id}")))?;
                match applied {
                    Some(queue) => Ok((job, queue)),
                    None => Err(policy::conflict(action, id, job.state)),
                }
            })
            .await
    }

    /// Answers the rows a read decoded, in order: the ones that could not be read are moved
    /// to `failed` (`poison.rs`) and read again; one that still cannot be read is left
    /// out, with an error logged.
    async fn readable(&self, decoded: Vec<Decoded<JobRecord>>) -> Result<Vec<JobRecord>> {
        let poisoned: Vec<Poisoned> = decoded
            .iter()
            .filter_map(|d| d.as_ref().err().cloned())
            .collect();
        if poisoned.is_empty() {
            return Ok(decoded.into_iter().filter_map(|d| d.ok()).collect());
        }
        let inner = self.inner.clone();
        let now = self.now();
        let again = self
            .inner
            .pool
            .write_tx(move |tx| {
                poison::quarantine(tx, &inner.queries, &poisoned, micros(now), &rfc3339(now))?;
                poisoned
                    .iter()
                    .map(|p| match rows::uuid(&p.id) {
                        Ok(id) => get_decoded(tx, &inner.queries, id),
                        Err(_) => Ok(None),
                    })
                    .collect::<Result<Vec<_>>>()
            })
            .await?;
        let mut again = again.into_iter();
        let mut jobs = Vec::with_capacity(decoded.len());
        for d in decoded {
            match d {
                Ok(job) => jobs.push(job),
                Err(p) => match again.next().flatten() {
                    Some(Ok(job)) => jobs.push(job),
                    Some(Err(_)) | None => {
                        if let Some(held_back) = UNREADABLE_LOGS.check() {
                            tracing::error!(job = %capped(&p.id), held_back, "a failed job's row still cannot be read; left out");
                        }
                    }
                },
            }
        }
        Ok(jobs)
    }

    /// Claims from one queue (`job_claim.sql`, or the controlled claim of a queue with
    /// settings), only jobs of `kinds` (a JSON array) if given.
    async fn claim(&self, params: &ClaimParams, kinds: Option<String>) -> Result<Vec<ClaimedJob>> {
        if params.limit == 0 {
            return Ok(Vec::new());
        }
        let inner = self.inner.clone();
        let now = micros(self.now());
        let params = params.clone();
        self.inner
            .pool
            .write_tx(move |tx| {
                // A queue with settings (paused, grouped, limited) takes the controlled
                // claim; every other queue the plain one. The settings row is read inside
                // this transaction: a primary-key probe, always current, no cache.
                if let Some(queue) = scheduling::settings(tx, &inner.queries, Some(&params.queue))?
                    .into_iter()
                    .next()
                    .filter(|s| !s.settings.is_plain())
                {
                    let cursor = inner.cursor(&params.queue);
                    let (claimed, cursor) = scheduling::claim(
                        tx,
                        &inner.queries,
                        &params,
                        &queue,
                        now,
                        cursor.as_deref(),
                        kinds.as_deref(),
                    )?;
                    inner.set_cursor(&params.queue, cursor);
                    return readable_claims(tx, &inner.queries, claimed, now);
                }
                let mut statement = tx
                    .prepare_cached(&inner.queries.job_claim[0])
                    .map_err(map_sqlite)?;
                let node = params.node.hyphenated().to_string();
                let (limit, lease_us) = (i64::from(params.limit), delay_us(params.lease));
                let mut found = statement
                    .query(named_params! {
                        ":queue": params.queue, ":node": node, ":limit": limit,
                        ":lease_us": lease_us, ":now": now, ":kinds": kinds,
                    })
                    .map_err(map_sqlite)?;
                let mut decoded = Vec::new();
                while let Some(row) = found.next().map_err(map_sqlite)? {
                    decoded.push(poison::decode(row, 0, claimed_job)?);
                }
                drop(found);
                drop(statement);
                let mut claimed = readable_claims(tx, &inner.queries, decoded, now)?;
                // RETURNING gives no order; hand jobs out in the order they were picked.
                claimed.sort_by(|a, b| {
                    (a.priority, a.run_at, a.lease.job_id).cmp(&(
                        b.priority,
                        b.run_at,
                        b.lease.job_id,
                    ))
                });
                Ok(claimed)
            })
            .await
    }

    /// Sends a wake-up to this process's subscribers.
    fn wake(&self, wakeup: Wakeup) {
        wake::send(&self.inner.wake, wakeup);
    }

    pub(crate) fn wake_queues(&self, queues: &[String]) {
        wake::send_queues(&self.inner.wake, queues.iter().map(String::as_str));
    }
}

#[async_trait]
impl Backend for SqliteBackend {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    async fn migrate(&self) -> Result<Vec<AppliedMigration>> {
        let inner = self.inner.clone();
        let now = micros(self.now());
        self.inner
            .pool
            .write_tx(move |tx| migrate::migrate(tx, &inner.queries, &inner.prefix, now))
            .await
    }

    async fn schema_check(&self) -> Result<()> {
        let inner = self.inner.clone();
        self.inner
            .pool
            .read(move |conn| migrate::check(conn, &inner.queries, &inner.prefix))
            .await
    }

    async fn job_insert(&self, job: &NewJob) -> Result<()> {
        self.upsert(std::slice::from_ref(job)).await.map(drop)
    }

    async fn job_insert_many(&self, jobs: &[NewJob]) -> Result<()> {
        self.upsert(jobs).await.map(drop)
    }

    async fn job_get(&self, params: &JobGetParams) -> Result<Option<JobRecord>> {
        let id = params.id;
        let inner = self.inner.clone();
        let found = self
            .inner
            .pool
            .read(move |conn| get_decoded(conn, &inner.queries, id))
            .await?;
        match found {
            None => Ok(None),
            Some(job) => Ok(self.readable(vec![job]).await?.pop()),
        }
    }

    /// A search with no range of creation times (`job_search.sql`).
    async fn job_list(&self, params: &JobListParams) -> Result<Vec<JobRecord>> {
        self.job_search(&JobSearchParams {
            list: params.clone(),
            ..JobSearchParams::default()
        })
        .await
    }

    async fn job_claim(&self, params: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        let kinds = params
            .kinds
            .as_deref()
            .map(serde_json::to_string)
            .transpose()?;
        self.claim(params, kinds).await
    }

    async fn job_finish_many(&self, finishes: &[Finish]) -> Result<Vec<FinishResult>> {
        if finishes.is_empty() {
            return Ok(Vec::new());
        }
        let inner = self.inner.clone();
        let now = self.now();
        let finishes = finishes.to_vec();
        let (results, woken) = self
            .inner
            .pool
            .write_tx(move |tx| {
                let (now, now_text) = (micros(now), rfc3339(now));
                // A lease listed twice is answered like the first time, as one set-based
                // statement would.
                let mut recorded: HashMap<Lease, JobState> = HashMap::new();
                let mut results = Vec::with_capacity(finishes.len());
                let mut woken: Vec<String> = Vec::new();
                for finish in &finishes {
                    if let Some(state) = recorded.get(&finish.lease) {
                        results.push(FinishResult::Recorded(*state));
                        continue;
                    }
                    match finish_one(tx, &inner.queries, finish, now, &now_text)? {
                        Some((state, queue)) => {
                            recorded.insert(finish.lease, state);
                            if state == JobState::Available && !woken.contains(&queue) {
                                woken.push(queue);
                            }
                            results.push(FinishResult::Recorded(state));
                        }
                        None => results.push(FinishResult::LeaseLost),
                    }
                }
                Ok((results, woken))
            })
            .await?;
        self.wake_queues(&woken);
        Ok(results)
    }

    async fn job_extend_many(&self, params: &JobExtendManyParams) -> Result<Vec<Lease>> {
        if params.leases.is_empty() {
            return Ok(Vec::new());
        }
        let inner = self.inner.clone();
        let now = micros(self.now());
        let (leases, by) = (params.leases.clone(), params.by);
        self.inner
            .pool
            .write_tx(move |tx| {
                let mut statement = tx
                    .prepare_cached(&inner.queries.job_extend_many[0])
                    .map_err(map_sqlite)?;
                let mut lost = Vec::new();
                for lease in leases {
                    let changed = statement
                        .execute(named_params! {
                            ":id": lease.job_id.hyphenated().to_string(),
                            ":attempt": lease.attempt,
                            ":by_us": delay_us(by),
                            ":now": now,
                        })
                        .map_err(map_sqlite)?;
                    if changed == 0 {
                        lost.push(lease);
                    }
                }
                Ok(lost)
            })
            .await
    }

    async fn job_retry(&self, params: &JobRetryParams) -> Result<JobRecord> {
        let (job, queue) = self
            .transition(params.id, |q| &q.job_retry[0], JobAction::Retry)
            .await?;
        self.wake(Wakeup::Jobs(queue));
        Ok(job)
    }

    async fn job_cancel(&self, params: &JobCancelParams) -> Result<JobRecord> {
        let (job, _) = self
            .transition(params.id, |q| &q.job_cancel[0], JobAction::Cancel)
            .await?;
        self.wake(Wakeup::Cancelled(params.id));
        Ok(job)
    }

    async fn job_clear(&self, params: &JobClearParams) -> Result<u64> {
        let inner = self.inner.clone();
        let queue = params.queue.clone();
        self.inner
            .pool
            .write_tx(move |tx| {
                let deleted = tx
                    .prepare_cached(&inner.queries.job_clear[0])
                    .and_then(|mut s| s.execute(named_params! { ":queue": queue }))
                    .map_err(map_sqlite)?;
                Ok(deleted as u64)
            })
            .await
    }

    async fn node_heartbeat(&self, node: &NodeInfo) -> Result<()> {
        self.register(node, None).await
    }

    async fn node_deregister(&self, params: &NodeDeregisterParams) -> Result<()> {
        let inner = self.inner.clone();
        let node = params.node.hyphenated().to_string();
        let now = self.now();
        let (lock_path, (_, woken)) = self
            .inner
            .pool
            .write_tx(move |tx| {
                let lock_path: Option<String> = tx
                    .prepare_cached(&inner.queries.node_deregister[0])
                    .and_then(|mut s| {
                        s.query_row(named_params! { ":id": node }, |r| r.get(0))
                            .optional()
                    })
                    .map(Option::flatten)
                    .map_err(map_sqlite)?;
                let stopping = crate::liveness::Release::Stopping(node);
                let released = crate::liveness::release_in(tx, &inner.queries, now, &stopping)?;
                Ok((lock_path, released))
            })
            .await?;
        self.wake_queues(&woken);
        // The node still holds its lock (it gives it back after this); the file goes now.
        if let Some(path) = lock_path {
            let _ = std::fs::remove_file(path);
        }
        Ok(())
    }

    fn maintenance(&self) -> Option<&dyn MaintenanceStore> {
        Some(self)
    }

    fn scheduling(&self) -> Option<&dyn SchedulingStore> {
        Some(self)
    }

    fn stats(&self) -> Option<&dyn StatsStore> {
        Some(self)
    }

    fn logs(&self) -> Option<&dyn hopper_core::job_log::LogStore> {
        Some(self)
    }

    fn node_liveness(&self) -> Option<&dyn hopper_core::NodeLiveness> {
        self.liveness_file()
            .map(|_| self as &dyn hopper_core::NodeLiveness)
    }

    async fn queue_stats(&self) -> Result<Vec<QueueStats>> {
        let inner = self.inner.clone();
        let now = micros(self.now());
        self.inner
            .pool
            .read(move |conn| {
                let mut statement = conn
                    .prepare_cached(&inner.queries.queue_stats[0])
                    .map_err(map_sqlite)?;
                let mut found = statement
                    .query(named_params! { ":now": now })
                    .map_err(map_sqlite)?;
                let mut stats = Vec::new();
                while let Some(r) = found.next().map_err(map_sqlite)? {
                    stats.push(QueueStats {
                        queue: col(r, 0)?,
                        available: col(r, 1)?,
                        scheduled: col(r, 2)?,
                        running: col(r, 3)?,
                        completed: col(r, 4)?,
                        failed: col(r, 5)?,
                        cancelled: col(r, 6)?,
                        oldest_available_secs: col(r, 7)?,
                    });
                }
                Ok(stats)
            })
            .await
    }

    async fn job_search(&self, params: &JobSearchParams) -> Result<Vec<JobRecord>> {
        if let Some(filter) = &params.list.meta {
            hopper_core::meta::validate_meta_filter(filter)?;
        }
        let inner = self.inner.clone();
        let params = params.clone();
        let meta = params.list.meta.as_ref().map(serde_json::Value::to_string);
        let decoded = self
            .inner
            .pool
            .read(move |conn| {
                let list = &params.list;
                records(
                    conn,
                    &inner.queries.job_search[0],
                    named_params! {
                        ":queue": list.queue,
                        ":state": list.state.map(|s| s.as_str()),
                        ":kind": list.kind,
                        ":group": list.group,
                        ":meta": meta,
                        ":before": list.before.map(|id| id.hyphenated().to_string()),
                        ":created_after": params.created_after.map(micros),
                        ":created_before": params.created_before.map(micros),
                        ":limit": i64::from(list.limit.max(1)),
                        ":listed": LISTED_VALUE_BYTES as i64,
                    },
                )
            })
            .await?;
        self.readable(decoded).await
    }

    async fn job_delete(&self, params: &JobDeleteParams) -> Result<()> {
        let id = params.id;
        let inner = self.inner.clone();
        self.inner
            .pool
            .write_tx(move |tx| {
                let deleted: Option<String> = tx
                    .prepare_cached(&inner.queries.job_delete[0])
                    .and_then(|mut s| {
                        s.query_row(named_params! { ":id": id.hyphenated().to_string() }, |r| {
                            r.get(0)
                        })
                        .optional()
                    })
                    .map_err(map_sqlite)?;
                if deleted.is_some() {
                    return Ok(());
                }
                match get(tx, &inner.queries, id)? {
                    None => Err(Error::NotFound(format!("job {id}"))),
                    Some(job) => Err(policy::conflict(JobAction::Delete, id, job.state)),
                }
            })
            .await
    }

    async fn job_retry_many(&self, params: &JobRetryManyParams) -> Result<u64> {
        let inner = self.inner.clone();
        let now = micros(self.now());
        let params = params.clone();
        let queues = self
            .inner
            .pool
            .write_tx(move |tx| {
                let mut statement = tx
                    .prepare_cached(&inner.queries.job_retry_many[0])
                    .map_err(map_sqlite)?;
                let mut rows = statement
                    .query(named_params! {
                        ":queue": params.queue,
                        ":kind": params.kind,
                        ":now": now,
                    })
                    .map_err(map_sqlite)?;
                let mut queues = Vec::new();
                while let Some(row) = rows.next().map_err(map_sqlite)? {
                    queues.push(col::<String>(row, 0)?);
                }
                Ok(queues)
            })
            .await?;
        self.wake_queues(&queues);
        Ok(queues.len() as u64)
    }

    async fn queue_list(&self) -> Result<Vec<QueueSettings>> {
        let inner = self.inner.clone();
        let all = self
            .inner
            .pool
            .read(move |conn| scheduling::settings(conn, &inner.queries, None))
            .await?;
        Ok(all.into_iter().map(|s| s.settings).collect())
    }

    async fn queue_update(&self, update: &QueueUpdate) -> Result<QueueSettings> {
        update.validate()?;
        let inner = self.inner.clone();
        let now = micros(self.now());
        let owned = update.clone();
        let settings = self
            .inner
            .pool
            .write_tx(move |tx| scheduling::update(tx, &inner.queries, &owned, now))
            .await?;
        // Claims read the settings in their own transaction, so there is no cache to
        // refresh; a resumed or loosened queue is worth an immediate claim, though.
        self.wake(Wakeup::Jobs(settings.queue.clone()));
        Ok(settings)
    }

    async fn cron_list(&self) -> Result<Vec<CronEntry>> {
        let inner = self.inner.clone();
        self.inner
            .pool
            .read(move |conn| scheduling::cron_list(conn, &inner.queries))
            .await
    }

    async fn subscribe(&self) -> Result<WakeupStream> {
        Ok(wake::subscribe(&self.inner.wake))
    }
}

/// The jobs a claim could read; the others are moved to `failed` in the claim's own
/// transaction (`poison.rs`), so that they neither block the queue nor stay `running`.
fn readable_claims(
    tx: &rusqlite::Connection,
    q: &crate::sql::Queries,
    decoded: Vec<Decoded<ClaimedJob>>,
    now: i64,
) -> Result<Vec<ClaimedJob>> {
    let (claimed, poisoned): (Vec<_>, Vec<_>) = decoded.into_iter().partition(|d| d.is_ok());
    let claimed: Vec<ClaimedJob> = claimed.into_iter().filter_map(|d| d.ok()).collect();
    let poisoned: Vec<Poisoned> = poisoned.into_iter().filter_map(|d| d.err()).collect();
    if !poisoned.is_empty() {
        let at = rows::time(now).map(rfc3339).unwrap_or_default();
        poison::quarantine(tx, q, &poisoned, now, &at)?;
    }
    Ok(claimed)
}
