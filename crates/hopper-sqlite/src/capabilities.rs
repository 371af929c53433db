//! The capabilities [`SqliteBackend`] offers beyond [`hopper_core::Backend`]: the
//! leader's maintenance, unique inserts and periodic jobs, per-minute statistics.

use async_trait::async_trait;
use hopper_core::backend::{
    JobAttemptsOfNodeParams, JobLeasesOfNodeParams, JobPromoteOutcome, JobPruneOutcome,
    JobPruneParams, JobStatsParams, JobVacuumParams, MaintenanceStore, MinuteStats, NodeInfo,
    NodeListParams, NodePage, NodeRecord, NodeReleaseDeadParams, SchedulingStore, StatsStore,
};
use hopper_core::{CronAdvance, CronEntry, Error, InsertOutcome, Lease, NewJob, NodeId, Result};
use rusqlite::named_params;

use hopper_core::JobId;
use hopper_core::job_log::{
    AttemptLog, JobLogAppend, LogStore, MAX_ATTEMPT_LOG_BYTES, merge_appends, read_stored_text,
};

use crate::error::map_sqlite;
use crate::minute_stats::{self, Finished};
use crate::outcome::released_rows;
use crate::rows::{self, col, delay_us, micros, rfc3339};
use crate::{SqliteBackend, poison, scheduling};

/// Rows a promotion batch takes at most (`LIMIT` in `job_promote_scheduled.sql`).
const PROMOTE_BATCH: usize = 1000;

#[async_trait]
impl MaintenanceStore for SqliteBackend {
    async fn job_promote_scheduled(&self) -> Result<JobPromoteOutcome> {
        let now_at = self.now();
        let now = micros(now_at);
        let mut total = 0u64;
        loop {
            let inner = self.inner.clone();
            let (promoted, queues, next) = self
                .inner
                .pool
                .write_tx(move |tx| {
                    let q = &inner.queries.job_promote_scheduled;
                    let mut statement = tx.prepare_cached(&q[0]).map_err(map_sqlite)?;
                    let mut rows = statement
                        .query(named_params! { ":now": now })
                        .map_err(map_sqlite)?;
                    let mut promoted = 0usize;
                    let mut queues: Vec<String> = Vec::new();
                    while let Some(row) = rows.next().map_err(map_sqlite)? {
                        promoted += 1;
                        let queue: String = col(row, 0)?;
                        if !queues.contains(&queue) {
                            queues.push(queue);
                        }
                    }
                    drop(rows);
                    let next_due = || -> Result<Option<i64>> {
                        tx.prepare_cached(&q[1])
                            .and_then(|mut s| {
                                s.query_row(named_params! { ":now": now }, |r| r.get(0))
                            })
                            .map_err(map_sqlite)
                    };
                    let mut next = next_due()?;
                    if next.is_some_and(|us| !poison::readable_instant(us)) {
                        // A run_at beyond what hopper reads: fail such jobs, and go on.
                        let text = rfc3339(now_at);
                        poison::quarantine_unreadable_scheduled(tx, &inner.queries, now, &text)?;
                        next = next_due()?;
                    }
                    Ok((promoted, queues, next))
                })
                .await?;
            self.wake_queues(&queues);
            total += promoted as u64;
            if promoted < PROMOTE_BATCH {
                return Ok(JobPromoteOutcome {
                    promoted: total,
                    next_due: rows::opt_time(next)?,
                });
            }
        }
    }

    async fn job_rescue_expired(&self) -> Result<u64> {
        let now = self.now();
        // The statement takes 1,000 jobs at a time; repeat while batches come back full,
        // as promotion does, so one call takes back every expired lease.
        let mut total = 0u64;
        loop {
            let inner = self.inner.clone();
            let (count, woken) = self
                .inner
                .pool
                .write_tx(move |tx| {
                    let mut statement = tx
                        .prepare_cached(&inner.queries.job_rescue_expired[0])
                        .map_err(map_sqlite)?;
                    released_rows(
                        &mut statement,
                        named_params! {
                            ":now": micros(now),
                            ":now_text": rfc3339(now),
                        },
                    )
                })
                .await?;
            self.wake_queues(&woken);
            total += count;
            if count < 1000 {
                return Ok(total);
            }
        }
    }

    async fn node_release_dead(&self, params: &NodeReleaseDeadParams) -> Result<u64> {
        let dead_before = micros(self.now()).saturating_sub(delay_us(params.dead_after));
        self.release_silent(dead_before).await
    }

    async fn job_leases_of_node(&self, params: &JobLeasesOfNodeParams) -> Result<Vec<Lease>> {
        self.leases_found(Found::Running, params.node, &params.leases)
            .await
    }

    async fn job_attempts_of_node(&self, params: &JobAttemptsOfNodeParams) -> Result<Vec<Lease>> {
        self.leases_found(Found::Latest, params.node, &params.leases)
            .await
    }

    async fn job_prune(&self, params: &JobPruneParams) -> Result<JobPruneOutcome> {
        let inner = self.inner.clone();
        let now = micros(self.now());
        let params = params.clone();
        let done_before = now.saturating_sub(delay_us(params.completed_retention));
        let failed_before = now.saturating_sub(delay_us(params.failed_retention));
        let below_id = rows::smallest_uuid_v7(done_before.max(failed_before));
        let bounds = move |s: &mut rusqlite::CachedStatement<'_>| -> rusqlite::Result<()> {
            for (name, value) in [
                (":below_id", &below_id as &dyn rusqlite::ToSql),
                (":done_before", &done_before),
                (":failed_before", &failed_before),
                (":now", &now),
            ] {
                if let Some(at) = s.parameter_index(name)? {
                    s.raw_bind_parameter(at, value)?;
                }
            }
            Ok(())
        };
        if params.dry_run {
            return self
                .inner
                .pool
                .read(move |conn| {
                    let mut s = conn
                        .prepare_cached(&inner.queries.job_prune[1])
                        .map_err(map_sqlite)?;
                    bounds(&mut s).map_err(map_sqlite)?;
                    let mut rows = s.raw_query();
                    let row = rows
                        .next()
                        .map_err(map_sqlite)?
                        .ok_or_else(|| Error::Schema("job_prune.sql counted no row".into()))?;
                    let count = |i| col::<i64>(row, i).map(|n| u64::try_from(n).unwrap_or(0));
                    Ok(JobPruneOutcome {
                        elected: true,
                        completed: count(0)?,
                        cancelled: count(1)?,
                        failed: count(2)?,
                        last_id: None,
                    })
                })
                .await;
        }
        self.inner
            .pool
            .write_tx(move |tx| {
                let mut s = tx
                    .prepare_cached(&inner.queries.job_prune[0])
                    .map_err(map_sqlite)?;
                bounds(&mut s).map_err(map_sqlite)?;
                s.raw_bind_parameter(":limit", i64::from(params.limit))
                    .map_err(map_sqlite)?;
                let after = params.after.map(|id| id.hyphenated().to_string());
                s.raw_bind_parameter(":after", after.unwrap_or_default())
                    .map_err(map_sqlite)?;
                let mut rows = s.raw_query();
                let mut outcome = JobPruneOutcome {
                    elected: true,
                    ..JobPruneOutcome::default()
                };
                while let Some(row) = rows.next().map_err(map_sqlite)? {
                    match col::<String>(row, 0)?.as_str() {
                        "completed" => outcome.completed += 1,
                        "cancelled" => outcome.cancelled += 1,
                        _ => outcome.failed += 1,
                    }
                    let id = rows::uuid(&col::<String>(row, 1)?)?;
                    outcome.last_id = outcome.last_id.max(Some(id));
                }
                Ok(outcome)
            })
            .await
    }

    /// SQLite keeps no dead row versions (a deleted or updated row's pages go back to the
    /// file's free list and are reused), so there is nothing to reclaim.
    async fn job_vacuum(&self, _params: &JobVacuumParams) -> Result<bool> {
        Ok(false)
    }
}

/// Which leases of a node [`SqliteBackend::leases_found`] looks for.
#[derive(Clone, Copy)]
enum Found {
    /// Running under the node (`job_leases_of_node.sql`).
    Running,
    /// Their job's latest attempt, made under the node (`job_attempts_of_node.sql`).
    Latest,
}

impl SqliteBackend {
    /// Of `leases`, those of `node` that `which` asks for, one probe of the primary key
    /// each.
    async fn leases_found(
        &self,
        which: Found,
        node: NodeId,
        leases: &[Lease],
    ) -> Result<Vec<Lease>> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let inner = self.inner.clone();
        let (leases, node) = (leases.to_vec(), node.hyphenated().to_string());
        self.inner
            .pool
            .read(move |conn| {
                let query = match which {
                    Found::Running => &inner.queries.job_leases_of_node[0],
                    Found::Latest => &inner.queries.job_attempts_of_node[0],
                };
                let mut statement = conn.prepare_cached(query).map_err(map_sqlite)?;
                let mut found = Vec::new();
                for lease in leases {
                    let exists = statement
                        .exists(named_params! {
                            ":id": lease.job_id.hyphenated().to_string(),
                            ":attempt": lease.attempt,
                            ":node": node,
                        })
                        .map_err(map_sqlite)?;
                    if exists {
                        found.push(lease);
                    }
                }
                Ok(found)
            })
            .await
    }
}

#[async_trait]
impl SchedulingStore for SqliteBackend {
    async fn job_upsert_many(&self, jobs: &[NewJob]) -> Result<Vec<InsertOutcome>> {
        self.upsert(jobs).await
    }

    async fn cron_register(&self, entries: &[CronEntry]) -> Result<()> {
        let inner = self.inner.clone();
        let now = micros(self.now());
        let entries = entries.to_vec();
        self.inner
            .pool
            .write_tx(move |tx| scheduling::cron_register(tx, &inner.queries, &entries, now))
            .await
    }

    async fn cron_advance(&self, advance: &CronAdvance) -> Result<bool> {
        let inner = self.inner.clone();
        let now = self.now();
        let advance = advance.clone();
        let (moved, woken) = self
            .inner
            .pool
            .write_tx(move |tx| scheduling::cron_advance(tx, &inner.queries, &advance, now))
            .await?;
        self.wake_queues(&woken);
        Ok(moved)
    }
}

#[async_trait]
impl StatsStore for SqliteBackend {
    async fn job_stats_per_minute(&self, params: &JobStatsParams) -> Result<Vec<MinuteStats>> {
        let inner = self.inner.clone();
        let now = micros(self.now());
        let since = now.saturating_sub(delay_us(params.window));
        let finished = self
            .inner
            .pool
            .read(move |conn| {
                let mut statement = conn
                    .prepare_cached(&inner.queries.job_stats_per_minute[0])
                    .map_err(map_sqlite)?;
                let mut rows = statement
                    .query(named_params! { ":since": since, ":now": now })
                    .map_err(map_sqlite)?;
                let mut finished = Vec::new();
                while let Some(row) = rows.next().map_err(map_sqlite)? {
                    finished.push(Finished {
                        at_us: col(row, 0)?,
                        completed: col(row, 1)?,
                        latency_ms: col(row, 2)?,
                        duration_ms: col(row, 3)?,
                    });
                }
                Ok(finished)
            })
            .await?;
        minute_stats::per_minute(&finished)
    }

    async fn node_list(&self, params: &NodeListParams) -> Result<NodePage> {
        params.check()?;
        let inner = self.inner.clone();
        let nodes = self
            .inner
            .pool
            .read(move |conn| {
                let mut statement = conn
                    .prepare_cached(&inner.queries.node_list[0])
                    .map_err(map_sqlite)?;
                let mut found = statement.query([]).map_err(map_sqlite)?;
                let mut nodes = Vec::new();
                while let Some(row) = found.next().map_err(map_sqlite)? {
                    nodes.extend(rows::listed("node", node_record(row)));
                }
                Ok(nodes)
            })
            .await?;
        hopper_core::node_list::page(nodes, params)
    }
}

#[async_trait]
impl LogStore for SqliteBackend {
    /// SQLite has one writer at a time and no row locks: nothing is ever held elsewhere.
    async fn job_log_append(&self, appends: &[JobLogAppend]) -> Result<Vec<Lease>> {
        let merged = merge_appends(appends);
        if merged.is_empty() {
            return Ok(Vec::new());
        }
        let inner = self.inner.clone();
        self.inner
            .pool
            .write_tx(move |tx| {
                let mut statement = tx
                    .prepare_cached(&inner.queries.job_log_append[0])
                    .map_err(map_sqlite)?;
                for m in &merged {
                    statement
                        .execute(named_params! {
                            ":job_id": m.lease.job_id.hyphenated().to_string(),
                            ":attempt": m.lease.attempt,
                            ":lines": serde_json::to_string(&m.lines)?,
                            ":bytes": m.bytes,
                            ":dropped": m.dropped,
                            ":bound": i64::try_from(MAX_ATTEMPT_LOG_BYTES).unwrap_or(i64::MAX),
                        })
                        .map_err(map_sqlite)?;
                }
                Ok(Vec::new())
            })
            .await
    }

    async fn job_logs_page(&self, job: JobId, after: i32, limit: u32) -> Result<Vec<AttemptLog>> {
        let inner = self.inner.clone();
        self.inner
            .pool
            .read(move |conn| {
                let mut statement = conn
                    .prepare_cached(&inner.queries.job_logs[0])
                    .map_err(map_sqlite)?;
                let mut rows = statement
                    .query(named_params! {
                        ":job_id": job.hyphenated().to_string(),
                        ":after": after,
                        ":limit": limit,
                    })
                    .map_err(map_sqlite)?;
                let mut logs = Vec::new();
                while let Some(r) = rows.next().map_err(map_sqlite)? {
                    logs.push(AttemptLog {
                        attempt: rows::int(col(r, 0)?, "attempt")?,
                        lines: read_stored_text(&col::<String>(r, 1)?),
                        dropped: col(r, 2)?,
                    });
                }
                Ok(logs)
            })
            .await
    }
}

/// A row of `node_list.sql`.
fn node_record(row: &rusqlite::Row<'_>) -> Result<NodeRecord> {
    Ok(NodeRecord {
        info: NodeInfo {
            id: rows::uuid(&col::<String>(row, 0)?)?,
            name: col(row, 1)?,
            queues: serde_json::from_str(&col::<String>(row, 2)?)?,
            concurrency: rows::int(col(row, 3)?, "concurrency")?,
        },
        started_at: rows::time(col(row, 4)?)?,
        heartbeat_at: rows::time(col(row, 5)?)?,
    })
}
