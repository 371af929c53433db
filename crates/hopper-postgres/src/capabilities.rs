//! The capabilities [`PgBackend`] offers beyond [`hopper_core::Backend`]: the leader's
//! maintenance, unique inserts and periodic jobs, per-minute statistics (per-job logs:
//! `logs.rs`).

use async_trait::async_trait;
use hopper_core::backend::{
    JobAttemptsOfNodeParams, JobLeasesOfNodeParams, JobPromoteOutcome, JobPruneOutcome,
    JobPruneParams, JobStatsParams, JobVacuumParams, MaintenanceStore, MinuteStats, NodeInfo,
    NodeListParams, NodePage, NodeRecord, NodeReleaseDeadParams, SchedulingStore, StatsStore,
};
use hopper_core::limits::MAX_ERROR_HISTORY;
use hopper_core::{
    CronAdvance, CronEntry, Error, InsertOutcome, JobId, Lease, NewJob, NodeId, Result,
};

use crate::PgBackend;
use crate::error::map_pg;
use crate::hot::millis;
use crate::sql::Query;

#[async_trait]
impl MaintenanceStore for PgBackend {
    async fn job_promote_scheduled(&self) -> Result<JobPromoteOutcome> {
        let client = self.client().await?;
        let statement = self
            .prepare(&client, &self.inner.queries.job_promote_scheduled)
            .await?;
        let now = self.inner.clock.now();
        let mut total = 0u64;
        let mut quarantined = false;
        loop {
            let row = statement
                .query_one(&**client, &[&now])
                .await
                .map_err(map_pg)?;
            let promoted: i64 = row.try_get(0).map_err(Error::database)?;
            total += u64::try_from(promoted).unwrap_or(0);
            if promoted < 1000 {
                match row.try_get(2) {
                    Ok(next_due) => {
                        return Ok(JobPromoteOutcome {
                            promoted: total,
                            next_due,
                        });
                    }
                    // A scheduled job's run_at cannot be read: fail those jobs, look again.
                    Err(e) if !quarantined => {
                        quarantined = true;
                        self.quarantine_unreadable_scheduled(&Error::database(e))
                            .await?;
                    }
                    Err(e) => return Err(Error::database(e)),
                }
            }
        }
    }

    async fn job_rescue_expired(&self) -> Result<u64> {
        let client = self.client().await?;
        let now = self.inner.clock.now();
        // The statement takes 1,000 jobs at a time; repeat while batches come back full,
        // as promotion does, so one call takes back every expired lease.
        let mut total = 0u64;
        loop {
            let row = self
                .text(&self.inner.queries.job_rescue_expired)
                .query_one(&**client, &[&now, &MAX_ERROR_HISTORY])
                .await
                .map_err(map_pg)?;
            let rescued = u64::try_from(row.get::<_, i64>(0)).unwrap_or(0);
            total += rescued;
            if rescued < 1000 {
                return Ok(total);
            }
        }
    }

    async fn node_release_dead(&self, params: &NodeReleaseDeadParams) -> Result<u64> {
        self.release_dead(crate::liveness::Release::Silent(params.dead_after))
            .await
    }

    async fn job_leases_of_node(&self, params: &JobLeasesOfNodeParams) -> Result<Vec<Lease>> {
        let query = &self.inner.queries.job_leases_of_node;
        self.leases_found(query, params.node, &params.leases).await
    }

    async fn job_attempts_of_node(&self, params: &JobAttemptsOfNodeParams) -> Result<Vec<Lease>> {
        let query = &self.inner.queries.job_attempts_of_node;
        self.leases_found(query, params.node, &params.leases).await
    }

    async fn job_prune(&self, params: &JobPruneParams) -> Result<JobPruneOutcome> {
        self.jobs_prune(params).await
    }

    async fn job_vacuum(&self, params: &JobVacuumParams) -> Result<bool> {
        self.jobs_vacuum(params.min_interval).await
    }
}

impl PgBackend {
    /// Of `leases`, those `query` finds of `node` (`job_leases_of_node.sql`,
    /// `job_attempts_of_node.sql`: `$1` ids, `$2` attempts, `$3` the node).
    async fn leases_found(
        &self,
        query: &Query,
        node: NodeId,
        leases: &[Lease],
    ) -> Result<Vec<Lease>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let (ids, attempts): (Vec<JobId>, Vec<i32>) =
            leases.iter().map(|l| (l.job_id, l.attempt)).unzip();
        let client = self.client().await?;
        let rows = self
            .text(query)
            .query(&**client, &[&ids, &attempts, &node])
            .await
            .map_err(map_pg)?;
        crate::rows::leases(&rows)
    }
}

#[async_trait]
impl SchedulingStore for PgBackend {
    async fn job_upsert_many(&self, jobs: &[NewJob]) -> Result<Vec<InsertOutcome>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(map_pg)?;
        let outcomes = self.upsert_many(&tx, jobs).await?;
        tx.commit().await.map_err(map_pg)?;
        Ok(outcomes)
    }

    async fn cron_register(&self, entries: &[CronEntry]) -> Result<()> {
        self.cron_entries_register(entries).await
    }

    async fn cron_advance(&self, advance: &CronAdvance) -> Result<bool> {
        self.cron_entry_advance(advance).await
    }
}

#[async_trait]
impl StatsStore for PgBackend {
    async fn job_stats_per_minute(&self, params: &JobStatsParams) -> Result<Vec<MinuteStats>> {
        let client = self.client().await?;
        let now = self.inner.clock.now();
        let rows = self
            .text(&self.inner.queries.job_stats_per_minute)
            .query(&**client, &[&millis(params.window), &now])
            .await
            .map_err(map_pg)?;
        rows.iter()
            .map(|r| {
                Ok(MinuteStats {
                    minute: r.try_get(0).map_err(Error::database)?,
                    completed: r.try_get(1).map_err(Error::database)?,
                    failed: r.try_get(2).map_err(Error::database)?,
                    latency_avg_ms: r.try_get(3).map_err(Error::database)?,
                    latency_p95_ms: r.try_get(4).map_err(Error::database)?,
                    duration_avg_ms: r.try_get(5).map_err(Error::database)?,
                    duration_p95_ms: r.try_get(6).map_err(Error::database)?,
                })
            })
            .collect()
    }

    async fn node_list(&self, params: &NodeListParams) -> Result<NodePage> {
        params.check()?;
        let client = self.client().await?;
        let rows = self
            .text(&self.inner.queries.node_list)
            .query(&**client, &[])
            .await
            .map_err(map_pg)?;
        let nodes = rows
            .iter()
            .filter_map(|r| crate::rows::listed("node", node_record(r)))
            .collect();
        hopper_core::node_list::page(nodes, params)
    }
}

/// A row of `node_list.sql`.
fn node_record(r: &tokio_postgres::Row) -> Result<NodeRecord> {
    Ok(NodeRecord {
        info: NodeInfo {
            id: r.try_get(0).map_err(Error::database)?,
            name: r.try_get(1).map_err(Error::database)?,
            queues: r.try_get(2).map_err(Error::database)?,
            concurrency: r.try_get(3).map_err(Error::database)?,
        },
        started_at: r.try_get(4).map_err(Error::database)?,
        heartbeat_at: r.try_get(5).map_err(Error::database)?,
    })
}
