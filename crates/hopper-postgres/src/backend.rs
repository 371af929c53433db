//! [`Backend`] for [`PgBackend`]: each method runs the `.sql` file of its name.

use std::sync::Arc;

use async_trait::async_trait;
use futures_util::StreamExt;
use hopper_core::backend::{
    AppliedMigration, Backend, ClaimParams, ClaimedJob, Finish, FinishResult, JobCancelParams,
    JobClearParams, JobDeleteParams, JobExtendManyParams, JobGetParams, JobListParams,
    JobRetryManyParams, JobRetryParams, JobSearchParams, MaintenanceStore, NodeDeregisterParams,
    NodeInfo, QueueStats, SchedulingStore, StatsStore, Wakeup, WakeupStream,
};
use hopper_core::policy::{self, JobAction};
use hopper_core::{
    CronEntry, Error, JobId, JobRecord, Lease, NewJob, QueueSettings, QueueUpdate, Result,
};

use crate::error::map_pg;
use crate::hot::millis;
use crate::pooled::{TxConnection, generic_plan};
use crate::settings::ClaimMode;
use crate::{PgBackend, copy, listen, migrate};

#[async_trait]
impl Backend for PgBackend {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    async fn migrate(&self) -> Result<Vec<AppliedMigration>> {
        let mut client = self.client().await?;
        migrate::migrate(&mut client, &self.inner.schema, self.inner.pooler).await
    }

    async fn schema_check(&self) -> Result<()> {
        let client = self.client().await?;
        migrate::check(&client, &self.inner.schema, self.inner.pooler).await
    }

    async fn job_insert(&self, job: &NewJob) -> Result<()> {
        job.validate()?;
        // Settings first: reloading them takes a pooled connection of its own, which a
        // pool of one could not give while this method holds the only one.
        self.refresh_settings().await?;
        let client = self.client().await?;
        if self.needs_full_insert(job) {
            return self.insert_in(&**client, job).await;
        }
        // The plain insert, prepared once per pooled connection: one round trip per job
        // instead of two (parse, then execute). Measured in docs/benchmarks.md (W2).
        let statement = self
            .prepare(&client, &self.inner.queries.job_insert)
            .await?;
        self.insert_plain(&**client, &statement, job).await
    }

    async fn job_insert_many(&self, jobs: &[NewJob]) -> Result<()> {
        if jobs.is_empty() {
            return Ok(());
        }
        // Before taking a connection: see job_insert.
        let upsert = self.needs_upsert_many(jobs).await?;
        let mut client = self.client().await?;
        if upsert {
            let tx = client.transaction().await.map_err(map_pg)?;
            self.upsert_many_in(&tx, jobs).await?;
            return tx.commit().await.map_err(map_pg);
        }
        let state_type = self.state_type(&**client).await?.clone();
        let now = self.now_or_local();
        copy::insert_jobs_pooled(client, &self.inner.queries, &state_type, jobs, now).await
    }

    async fn job_get(&self, params: &JobGetParams) -> Result<Option<JobRecord>> {
        let rows: Vec<_> = self.job_row(params.id).await?.into_iter().collect();
        Ok(self.job_records(&rows, true).await?.pop())
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
        // Queues that use a scheduling feature have their own statements, which pick by
        // their own rules; the others keep the plain one below (settings.rs picks, from a
        // cache). Every statement takes only the asked kinds, when asked.
        let jobs = match self.claim_mode(&params.queue).await? {
            ClaimMode::Paused => return Ok(Vec::new()),
            ClaimMode::Fair => self.claim_fair(params).await,
            ClaimMode::Limited { fair } => self.claim_limited(params, fair).await,
            ClaimMode::Plain => {
                let client = self.client().await?;
                match &params.kinds {
                    Some(kinds) => self.claim_kinds(&client, params, kinds).await,
                    None => self.claim_plain(&client, params).await,
                }
            }
        };
        // Jobs the claim could not read are failed once it has committed (poison.rs).
        self.quarantine_held().await;
        jobs
    }

    async fn job_finish_many(&self, finishes: &[Finish]) -> Result<Vec<FinishResult>> {
        // Failed or cancelled between its SET and RESET, the connection leaves the pool.
        let client = TxConnection::new(self.client().await?);
        self.finish_pooled(client, finishes).await
    }

    async fn job_extend_many(&self, params: &JobExtendManyParams) -> Result<Vec<Lease>> {
        let (leases, by) = (&params.leases, params.by);
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        // With a generic plan, as the outcomes (outcomes.rs, `finish_pooled`, says why); failed
        // or cancelled between its SET and RESET, the connection leaves the pool.
        let client = TxConnection::new(self.client().await?);
        let statement = self
            .prepare(&client, &self.inner.queries.job_extend_many)
            .await?;
        // In job id order, as the outcomes (outcomes.rs, `Split::new`): the update locks its
        // rows in that order, so it and a batch of outcomes over the same rows never wait
        // for each other in a cycle.
        let mut in_order: Vec<&Lease> = leases.iter().collect();
        in_order.sort_unstable_by_key(|l| l.job_id);
        let ids: Vec<JobId> = in_order.iter().map(|l| l.job_id).collect();
        let attempts: Vec<i32> = in_order.iter().map(|l| l.attempt).collect();
        let now = self.inner.clock.now();
        let by_ms = millis(by);
        let args: [&(dyn tokio_postgres::types::ToSql + Sync); 4] = [&ids, &attempts, &by_ms, &now];
        let work = statement.query(&***client, &args);
        let rows = generic_plan(&client, self.inner.pooler, work).await?;
        client.release();
        let kept: std::collections::HashSet<JobId> = rows.iter().map(|r| r.get(0)).collect();
        Ok(leases
            .iter()
            .filter(|l| !kept.contains(&l.job_id))
            .copied()
            .collect())
    }

    async fn job_retry(&self, params: &JobRetryParams) -> Result<JobRecord> {
        let id = params.id;
        let now = self.inner.clock.now();
        let statement = self.text(&self.inner.queries.job_retry);
        let rows = self
            .lock_bounded(async |client| statement.query(client, &[&id, &now]).await)
            .await?;
        let job = self
            .job_get(&JobGetParams { id })
            .await?
            .ok_or_else(|| Error::NotFound(format!("job {id}")))?;
        if rows.is_empty() {
            return Err(policy::conflict(JobAction::Retry, id, job.state));
        }
        Ok(job)
    }

    async fn job_cancel(&self, params: &JobCancelParams) -> Result<JobRecord> {
        let id = params.id;
        let now = self.inner.clock.now();
        let statement = self.text(&self.inner.queries.job_cancel);
        let rows = self
            .lock_bounded(async |client| statement.query(client, &[&id, &now]).await)
            .await?;
        let job = self
            .job_get(&JobGetParams { id })
            .await?
            .ok_or_else(|| Error::NotFound(format!("job {id}")))?;
        if rows.is_empty() {
            return Err(policy::conflict(JobAction::Cancel, id, job.state));
        }
        Ok(job)
    }

    async fn job_clear(&self, params: &JobClearParams) -> Result<u64> {
        let statement = self.text(&self.inner.queries.job_clear);
        self.lock_bounded(async |client| statement.execute(client, &[&params.queue]).await)
            .await
    }

    async fn node_heartbeat(&self, node: &NodeInfo) -> Result<()> {
        let client = self.client().await?;
        let now = self.inner.clock.now();
        self.text(&self.inner.queries.node_heartbeat)
            .execute(
                &**client,
                &[&node.id, &node.name, &node.queues, &node.concurrency, &now],
            )
            .await
            .map_err(map_pg)?;
        Ok(())
    }

    /// One transaction: the node's own row locked, waited for if another transaction
    /// holds it (`node_deregister.sql`), then what still runs under the node released and
    /// the row deleted unless a job of it is held (`node_release_dead.sql`).
    async fn node_deregister(&self, params: &NodeDeregisterParams) -> Result<()> {
        let client = TxConnection::new(self.client().await?);
        client.batch_execute("BEGIN").await.map_err(map_pg)?;
        self.text(&self.inner.queries.node_deregister)
            .execute(&***client, &[&params.node])
            .await
            .map_err(map_pg)?;
        let stopping = crate::liveness::Release::Stopping(params.node);
        self.release_on(&***client, stopping).await?;
        client.batch_execute("COMMIT").await.map_err(map_pg)?;
        client.release();
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
        let on = self
            .inner
            .liveness
            .load(std::sync::atomic::Ordering::Relaxed);
        // Behind a transaction pooler with no direct URL there is no session to hold a
        // lock in: nodes are found dead by their heartbeat, as before.
        (on && self.inner.listen.is_some()).then_some(self as &dyn hopper_core::NodeLiveness)
    }

    async fn queue_stats(&self) -> Result<Vec<QueueStats>> {
        let client = self.client().await?;
        let now = self.inner.clock.now();
        let rows = self
            .text(&self.inner.queries.queue_stats)
            .query(&**client, &[&now])
            .await
            .map_err(map_pg)?;
        Ok(rows
            .iter()
            .map(|r| QueueStats {
                queue: r.get(0),
                available: r.get(1),
                scheduled: r.get(2),
                running: r.get(3),
                completed: r.get(4),
                failed: r.get(5),
                cancelled: r.get(6),
                oldest_available_secs: r.get(7),
            })
            .collect())
    }

    async fn job_search(&self, params: &JobSearchParams) -> Result<Vec<JobRecord>> {
        let list = &params.list;
        if let Some(filter) = &list.meta {
            hopper_core::meta::validate_meta_filter(filter)?;
        }
        let client = self.client().await?;
        let state = list.state.map(|s| s.as_str());
        let limit = i64::from(list.limit.max(1));
        let rows = self
            .text(&self.inner.queries.job_search)
            .query(
                &**client,
                &[
                    &list.queue,
                    &state,
                    &list.kind,
                    &list.before,
                    &params.created_after,
                    &params.created_before,
                    &limit,
                    &list.group,
                    &list.meta,
                    &listed_value_bytes(),
                ],
            )
            .await
            .map_err(map_pg)?;
        drop(client);
        self.job_records(&rows, false).await
    }

    async fn job_delete(&self, params: &JobDeleteParams) -> Result<()> {
        let id = params.id;
        let statement = self.text(&self.inner.queries.job_delete);
        let rows = self
            .lock_bounded(async |client| statement.query(client, &[&id]).await)
            .await?;
        if !rows.is_empty() {
            return Ok(());
        }
        match self.job_get(&JobGetParams { id }).await? {
            None => Err(Error::NotFound(format!("job {id}"))),
            Some(job) => Err(policy::conflict(JobAction::Delete, id, job.state)),
        }
    }

    async fn job_retry_many(&self, params: &JobRetryManyParams) -> Result<u64> {
        let now = self.inner.clock.now();
        let statement = self.text(&self.inner.queries.job_retry_many);
        let args: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
            [&params.queue, &params.kind, &now];
        // A unique key taken by an insert between the statement's check and its update
        // breaks the unique index (a conflict, nothing written): run again, it sees the
        // holder and leaves that job failed.
        let mut conflicts = 0;
        let rows = loop {
            match self
                .lock_bounded(async |client| statement.query(client, &args).await)
                .await
            {
                Err(Error::Conflict(_)) if conflicts < 3 => conflicts += 1,
                rows => break rows?,
            }
        };
        let mut total = 0u64;
        for row in rows {
            let n: i64 = row.try_get(0).map_err(Error::database)?;
            total += u64::try_from(n).unwrap_or(0);
        }
        Ok(total)
    }

    async fn subscribe(&self) -> Result<WakeupStream> {
        let backend = self.clone();
        let on_settings: listen::OnSettings = Arc::new(move || backend.inner.settings.invalidate());
        // Behind a transaction pooler with no direct URL there is no session to LISTEN
        // in: the runtime polls (its `poll_interval`), settings are reloaded by age.
        let remote = match &self.inner.listen {
            Some(config) => {
                let channel = format!("{}_wake", self.inner.schema);
                listen::subscribe(config.clone(), channel, on_settings).await?
            }
            None => futures_util::stream::pending().boxed(),
        };
        // Wake-ups this process arms for itself (a limited queue has room again).
        let local =
            futures_util::stream::unfold(self.inner.local_wake.subscribe(), |mut rx| async move {
                match rx.recv().await {
                    Ok(wakeup) => Some((wakeup, rx)),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        Some((Wakeup::Resync, rx))
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => None,
                }
            });
        Ok(Box::pin(futures_util::stream::select(remote, local)))
    }

    async fn queue_list(&self) -> Result<Vec<QueueSettings>> {
        self.queue_settings_list().await
    }

    async fn queue_update(&self, update: &QueueUpdate) -> Result<QueueSettings> {
        self.queue_settings_update(update).await
    }

    async fn cron_list(&self) -> Result<Vec<CronEntry>> {
        self.cron_entries_list().await
    }
}

/// [`hopper_core::LISTED_VALUE_BYTES`] as the listing queries take it.
fn listed_value_bytes() -> i64 {
    hopper_core::LISTED_VALUE_BYTES as i64
}
