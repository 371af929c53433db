//! Claims of queues that use a scheduling feature (groups, limits, pause), and the queue
//! settings methods. The plain claim stays in `backend.rs`; [`PgBackend::claim`] picks
//! the statement per queue from the settings cache (`settings.rs`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use hopper_core::{
    ClaimParams, ClaimedJob, Error, Priority, QueueSettings, QueueUpdate, RateLimit, Result,
};
use tokio_postgres::Row;

use crate::PgBackend;
use crate::error::map_pg;
use crate::settings::{Bucket, ClaimMode, LIMIT_RETRY};

/// Reads a claimed job from `row`, whose job columns start at `at` (the columns of
/// `job_claim.sql`'s RETURNING, in order).
pub(crate) fn claimed_job(row: &Row, at: usize) -> Result<ClaimedJob> {
    let get = |i: usize| at + i;
    let timeout_ms: i32 = row.try_get(get(8)).map_err(Error::database)?;
    Ok(ClaimedJob {
        lease: hopper_core::Lease {
            job_id: row.try_get(get(0)).map_err(Error::database)?,
            attempt: row.try_get(get(1)).map_err(Error::database)?,
        },
        queue: row.try_get(get(2)).map_err(Error::database)?,
        kind: row.try_get(get(3)).map_err(Error::database)?,
        args: row.try_get(get(4)).map_err(Error::database)?,
        priority: Priority(row.try_get(get(5)).map_err(Error::database)?),
        counted_attempt: row.try_get(get(6)).map_err(Error::database)?,
        max_attempts: row.try_get(get(7)).map_err(Error::database)?,
        timeout: Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0)),
        created_at: row.try_get(get(9)).map_err(Error::database)?,
        run_at: row.try_get(get(10)).map_err(Error::database)?,
    })
}

/// What a fair or limited claim statement returned: the jobs, the running count it saw,
/// and the groups served.
struct Claimed {
    jobs: Vec<ClaimedJob>,
    running: Option<i64>,
    groups: Vec<String>,
}

impl Claimed {
    /// The group served furthest along the ring that started after `cursor`: groups after
    /// the cursor come first (in key order), then, wrapped around, the others.
    fn last_group(&self, cursor: Option<&str>) -> Option<String> {
        let cursor = cursor.unwrap_or("");
        self.groups
            .iter()
            .max_by(|a, b| {
                let place = |g: &String| (g.as_str() <= cursor, g.clone());
                place(a).cmp(&place(b))
            })
            .cloned()
    }
}

/// Reads the rows of `job_claim_fair.sql` / `job_claim_limited.sql`: running count, (a
/// column kept NULL), group, then the job (NULL when nothing was claimed).
fn read_claimed(rows: &[Row]) -> Result<Claimed> {
    let mut out = Claimed {
        jobs: Vec::with_capacity(rows.len()),
        running: None,
        groups: Vec::new(),
    };
    for row in rows {
        out.running = row.try_get(0).map_err(Error::database)?;
        let id: Option<uuid::Uuid> = row.try_get(3).map_err(Error::database)?;
        if id.is_none() {
            continue;
        }
        let group: Option<String> = row.try_get(2).map_err(Error::database)?;
        if let Some(group) = group
            && !out.groups.contains(&group)
        {
            out.groups.push(group);
        }
        out.jobs.push(claimed_job(row, 3)?);
    }
    Ok(out)
}

/// Reads a `queues` row (`queue_settings_all.sql`, `queue_update.sql`).
fn queue_settings(row: &Row) -> Result<QueueSettings> {
    let count = |i: usize| -> Result<Option<u32>> {
        let n: Option<i32> = row.try_get(i).map_err(Error::database)?;
        Ok(n.and_then(|n| u32::try_from(n).ok()))
    };
    let rate = match (count(5)?, count(6)?) {
        (Some(jobs), Some(ms)) => Some(RateLimit {
            jobs,
            per: Duration::from_millis(u64::from(ms)),
            burst: count(7)?.unwrap_or(1),
        }),
        _ => None,
    };
    Ok(QueueSettings {
        queue: row.try_get(0).map_err(Error::database)?,
        paused: row.try_get(1).map_err(Error::database)?,
        grouped: row.try_get(2).map_err(Error::database)?,
        max_running: count(3)?,
        max_running_per_group: count(4)?,
        rate,
    })
}

fn as_i32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

impl PgBackend {
    /// Refreshes the settings cache if it is stale.
    pub(crate) async fn refresh_settings(&self) -> Result<()> {
        self.inner.settings.refresh(|| self.load_settings()).await
    }

    async fn load_settings(&self) -> Result<Vec<QueueSettings>> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&self.inner.queries.queue_settings_all)
            .await
            .map_err(map_pg)?;
        let rows = client.query(&statement, &[]).await.map_err(map_pg)?;
        rows.iter().map(queue_settings).collect()
    }

    /// How `queue` is claimed now (refreshing the cache first when stale).
    pub(crate) async fn claim_mode(&self, queue: &str) -> Result<ClaimMode> {
        self.refresh_settings().await?;
        Ok(self.inner.settings.mode(queue))
    }

    /// Claims from a queue with groups and no limits: `job_claim_fair.sql`, no lock.
    ///
    /// Runs in a transaction that forces a generic plan ([`GENERIC_PLAN`]); the three
    /// requests are pipelined, so this costs one round trip like the plain claim.
    pub(crate) async fn claim_fair(&self, params: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&self.inner.queries.job_claim_fair)
            .await
            .map_err(map_pg)?;
        let cursor = self.inner.settings.cursor(&params.queue);
        let none_i32: Option<i32> = None;
        let none_f64: Option<f64> = None;
        let none_at: Option<DateTime<Utc>> = None;
        let limit = i64::from(params.limit);
        let lease = lease_ms(params.lease);
        let now = self.inner.clock.now();
        let args: [&(dyn tokio_postgres::types::ToSql + Sync); 10] = [
            &params.queue,
            &params.node,
            &limit,
            &lease,
            &now,
            &cursor,
            &none_i32,
            &none_i32,
            &none_f64,
            &none_at,
        ];
        let (begun, rows, committed) = tokio::join!(
            client.batch_execute(GENERIC_PLAN),
            client.query(&statement, &args),
            client.batch_execute("COMMIT"),
        );
        begun.map_err(map_pg)?;
        let rows = rows.map_err(map_pg)?;
        committed.map_err(map_pg)?;
        let claimed = read_claimed(&rows)?;
        if let Some(group) = claimed.last_group(cursor.as_deref()) {
            self.inner.settings.set_cursor(&params.queue, group);
        }
        Ok(claimed.jobs)
    }

    /// Claims from a limited queue: locks its settings row (`queue_lock.sql`), works out
    /// how many jobs the rate bucket allows, claims (`job_claim_limited.sql` or
    /// `job_claim_fair.sql`) within the concurrency limits, stores the bucket, commits.
    /// When the claim was cut short by a limit, arms a local wake-up for when there will
    /// be room again.
    ///
    /// Two round trips: BEGIN and the lock pipelined, then the claim and COMMIT pipelined.
    pub(crate) async fn claim_limited(
        &self,
        params: &ClaimParams,
        fair: bool,
    ) -> Result<Vec<ClaimedJob>> {
        let client = self.client().await?;
        let result = self.claim_limited_on(&client, params, fair).await;
        if result.is_err() {
            // Never hand a connection back to the pool inside a transaction.
            let _ = client.batch_execute("ROLLBACK").await;
        }
        result
    }

    async fn claim_limited_on(
        &self,
        client: &deadpool_postgres::Object,
        params: &ClaimParams,
        fair: bool,
    ) -> Result<Vec<ClaimedJob>> {
        let q = &self.inner.queries;
        let lock = client.prepare_cached(&q.queue_lock).await.map_err(map_pg)?;
        let claim = client
            .prepare_cached(if fair {
                &q.job_claim_fair
            } else {
                &q.job_claim_limited
            })
            .await
            .map_err(map_pg)?;
        let now = self.inner.clock.now();
        let args: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&params.queue, &now];
        let (begun, row) = tokio::join!(
            client.batch_execute(GENERIC_PLAN),
            client.query_opt(&lock, &args),
        );
        begun.map_err(map_pg)?;
        let Some(row) = row.map_err(map_pg)? else {
            // The settings row is gone (never happens through hopper): nothing limits it.
            client.batch_execute("COMMIT").await.map_err(map_pg)?;
            self.inner.settings.invalidate();
            return Ok(Vec::new());
        };
        let paused: bool = row.try_get(0).map_err(Error::database)?;
        if paused {
            client.batch_execute("COMMIT").await.map_err(map_pg)?;
            return Ok(Vec::new());
        }
        let max_running: Option<i32> = row.try_get(1).map_err(Error::database)?;
        let per_group: Option<i32> = row.try_get(2).map_err(Error::database)?;
        let rate_jobs: Option<i32> = row.try_get(3).map_err(Error::database)?;
        let rate_ms: Option<i32> = row.try_get(4).map_err(Error::database)?;
        let burst: Option<i32> = row.try_get(5).map_err(Error::database)?;
        let tokens: f64 = row.try_get(6).map_err(Error::database)?;
        let refilled_at: Option<DateTime<Utc>> = row.try_get(7).map_err(Error::database)?;
        let at: DateTime<Utc> = row.try_get(8).map_err(Error::database)?;
        let bucket = match (rate_jobs, rate_ms) {
            (Some(jobs), Some(ms)) => {
                let rate = RateLimit {
                    jobs: u32::try_from(jobs).unwrap_or(1),
                    per: Duration::from_millis(u64::try_from(ms).unwrap_or(1)),
                    burst: burst.and_then(|b| u32::try_from(b).ok()).unwrap_or(1),
                };
                Some(Bucket::refill(&rate, tokens, refilled_at, at))
            }
            _ => None,
        };
        let allowed = bucket.map_or(params.limit, |b| b.whole().min(params.limit));
        let allowed_i64 = i64::from(allowed);
        let lease = lease_ms(params.lease);
        let tokens_left = bucket.map(|b| b.tokens);
        let refill_at = bucket.map(|_| at);
        let cursor = self.inner.settings.cursor(&params.queue);
        let fair_params: [&(dyn tokio_postgres::types::ToSql + Sync); 10] = [
            &params.queue,
            &params.node,
            &allowed_i64,
            &lease,
            &now,
            &cursor,
            &per_group,
            &max_running,
            &tokens_left,
            &refill_at,
        ];
        let plain_params: [&(dyn tokio_postgres::types::ToSql + Sync); 8] = [
            &params.queue,
            &params.node,
            &allowed_i64,
            &lease,
            &now,
            &max_running,
            &tokens_left,
            &refill_at,
        ];
        let query: &[&(dyn tokio_postgres::types::ToSql + Sync)] =
            if fair { &fair_params } else { &plain_params };
        let (rows, committed) =
            tokio::join!(client.query(&claim, query), client.batch_execute("COMMIT"),);
        let rows = rows.map_err(map_pg)?;
        committed.map_err(map_pg)?;
        let claimed = read_claimed(&rows)?;
        if let Some(group) = claimed.last_group(cursor.as_deref()) {
            self.inner.settings.set_cursor(&params.queue, group);
        }
        let n = u32::try_from(claimed.jobs.len()).unwrap_or(u32::MAX);
        let running = claimed.running.unwrap_or(0);
        let capped = max_running.is_some_and(|max| running + i64::from(n) >= i64::from(max))
            || (fair && per_group.is_some() && n < allowed);
        if let Some(bucket) = bucket
            && n == allowed
            && allowed < params.limit
        {
            // Every token was used and more was wanted: come back for the next one.
            let wait = bucket.next_token_in(n).max(Duration::from_millis(1));
            self.inner.settings.arm(&params.queue, wait);
        } else if capped {
            self.inner.settings.arm(&params.queue, LIMIT_RETRY);
        }
        Ok(claimed.jobs)
    }

    /// Every queue that has settings.
    pub(crate) async fn queue_settings_list(&self) -> Result<Vec<QueueSettings>> {
        self.load_settings().await
    }

    /// Applies `update`, tells every node, and refreshes this process's cache.
    pub(crate) async fn queue_settings_update(
        &self,
        update: &QueueUpdate,
    ) -> Result<QueueSettings> {
        update.validate()?;
        let client = self.client().await?;
        let max_running = update.max_running.flatten().map(as_i32);
        let per_group = update.max_running_per_group.flatten().map(as_i32);
        let rate = update.rate.flatten();
        let rate_jobs = rate.map(|r| as_i32(r.jobs));
        let rate_ms = rate.map(|r| i32::try_from(r.per.as_millis()).unwrap_or(i32::MAX));
        let rate_burst = rate.map(|r| as_i32(r.burst));
        let row = client
            .query_one(
                &self.inner.queries.queue_update,
                &[
                    &update.queue,
                    &update.paused,
                    &update.max_running.is_some(),
                    &max_running,
                    &update.max_running_per_group.is_some(),
                    &per_group,
                    &update.rate.is_some(),
                    &rate_jobs,
                    &rate_ms,
                    &rate_burst,
                ],
            )
            .await
            .map_err(map_pg)?;
        self.inner.settings.invalidate();
        queue_settings(&row)
    }
}

/// Opens the claim transaction of a fair or limited queue with a generic plan.
///
/// Left to itself, PostgreSQL plans these statements anew for every execution (their
/// custom plans look cheaper than the generic one), and planning the fair claim's
/// recursive CTE costs more than running it (measured: 3-6 ms against about 1 ms). The
/// generic plan is the one wanted anyway: every scan is an index range scan fixed by the
/// statement's shape, and the LIMITs are small. `SET LOCAL` keeps the setting to this
/// transaction, so the plain claim, on the same pooled connections, is unaffected.
const GENERIC_PLAN: &str = "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan";

fn lease_ms(lease: Duration) -> i32 {
    i32::try_from(lease.as_millis()).unwrap_or(i32::MAX)
}
