//! Claims of queues that use a scheduling feature (groups, limits, pause), and the queue
//! settings methods. The plain claim is in `hot.rs`; [`PgBackend::claim`] picks
//! the statement per queue from the settings cache (`settings.rs`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use hopper_core::policy::TokenBucket;
use hopper_core::{
    Backend, ClaimParams, ClaimedJob, Error, Finish, Priority, QueueSettings, QueueUpdate,
    RateLimit, Result,
};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::PgBackend;
use crate::error::map_pg;
use crate::poison::{Poisoned, Quarantine};
use crate::pooled::TxConnection;
use crate::settings::ring::Turns;
use crate::settings::{ClaimMode, LIMIT_RETRY};
use crate::statement::driver;

pub(crate) mod combine;
mod fair;

use combine::Handoff;
use fair::FairLimits;

/// Reads a claimed job from `row`, whose job columns start at `at` (the columns of
/// `job_claim.sql`'s RETURNING, in order). Counts no claim could leave (written by hand)
/// are an error ([`hopper_core::lease::claimed_counts`]), so the caller fails the job as
/// unreadable.
pub(crate) fn claimed_job(row: &Row, at: usize) -> Result<ClaimedJob> {
    let get = |i: usize| at + i;
    let timeout_ms: i32 = row.try_get(get(8)).map_err(Error::database)?;
    let attempt: i32 = row.try_get(get(1)).map_err(Error::database)?;
    let used: i64 = row.try_get(get(6)).map_err(Error::database)?;
    let (attempt, counted_attempt) = hopper_core::lease::claimed_counts(attempt.into(), used)?;
    Ok(ClaimedJob {
        lease: hopper_core::Lease {
            job_id: row.try_get(get(0)).map_err(Error::database)?,
            attempt,
        },
        queue: row.try_get(get(2)).map_err(Error::database)?,
        kind: row.try_get(get(3)).map_err(Error::database)?,
        args: row.try_get(get(4)).map_err(Error::database)?,
        priority: Priority(row.try_get(get(5)).map_err(Error::database)?),
        counted_attempt,
        max_attempts: row.try_get(get(7)).map_err(Error::database)?,
        timeout: Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0)),
        created_at: row.try_get(get(9)).map_err(Error::database)?,
        run_at: row.try_get(get(10)).map_err(Error::database)?,
        meta: row.try_get(get(11)).map_err(Error::database)?,
    })
}

/// What a fair or limited claim statement returned: the jobs, the running count it saw,
/// the fair claim's next cursor (the last group it picked), how many rows it locked
/// without claiming them (released at its commit), and the groups that gave their whole
/// share (they may have more).
struct Claimed {
    jobs: Vec<ClaimedJob>,
    running: Option<i64>,
    cursor: Option<String>,
    unpicked: i64,
    more: Vec<String>,
}

/// Reads the rows of `job_claim_fair.sql` / `job_claim_limited.sql`: running count, next
/// cursor, rows locked but not claimed, groups that may have more, then the job (NULL
/// when nothing was claimed).
/// Puts claimed jobs in the claim index's order (priority, run_at, id), the order to start
/// them in. The claims' UPDATEs find their rows by `id = ANY (…)` and return them in the
/// primary key's order.
pub(crate) fn in_claim_order(jobs: &mut [ClaimedJob]) {
    jobs.sort_unstable_by_key(|j| (j.priority, j.run_at, j.lease.job_id));
}

fn read_claimed(rows: &[Row], quarantine: &Quarantine) -> Result<Claimed> {
    let mut out = Claimed {
        jobs: Vec::with_capacity(rows.len()),
        running: None,
        cursor: None,
        unpicked: 0,
        more: Vec::new(),
    };
    for row in rows {
        out.running = row.try_get(0).map_err(Error::database)?;
        out.cursor = row.try_get(1).map_err(Error::database)?;
        out.unpicked = row.try_get(2).map_err(Error::database)?;
        let more: Option<Vec<String>> = row.try_get(3).map_err(Error::database)?;
        out.more = more.unwrap_or_default();
        let id: Option<uuid::Uuid> = row.try_get(4).map_err(Error::database)?;
        if id.is_some() {
            match claimed_job(row, 4) {
                Ok(job) => out.jobs.push(job),
                Err(e) => quarantine.hold(Poisoned::of(row, 4, &e)?),
            }
        }
    }
    in_claim_order(&mut out.jobs);
    Ok(out)
}

/// What one limited claim got, and what its caller should do next.
#[derive(Default)]
struct LimitedClaim {
    jobs: Vec<ClaimedJob>,
    /// Nothing was claimed from a cached ring although no limit stopped it: reload the
    /// ring and try again.
    look_again: bool,
    /// The claim came back short, not cut by a limit, and these groups gave their whole
    /// share: ask them for the rest.
    more: Vec<String>,
}

/// A limited queue's settings row as `queue_lock.sql` returned it (locked), with the rate
/// bucket refilled up to the claim's instant.
struct Limits {
    paused: bool,
    max_running: Option<i32>,
    per_group: Option<i32>,
    bucket: Option<TokenBucket>,
    /// The claim's instant (the lock's `now`).
    at: DateTime<Utc>,
}

impl Limits {
    fn read(row: &Row) -> Result<Self> {
        let get = |i: usize| -> Result<Option<i32>> { row.try_get(i).map_err(Error::database) };
        let tokens: f64 = row.try_get(6).map_err(Error::database)?;
        let refilled_at: Option<DateTime<Utc>> = row.try_get(7).map_err(Error::database)?;
        let at: DateTime<Utc> = row.try_get(8).map_err(Error::database)?;
        let bucket = match (get(3)?, get(4)?) {
            (Some(jobs), Some(ms)) => {
                let rate = RateLimit {
                    jobs: u32::try_from(jobs).unwrap_or(1),
                    per: Duration::from_millis(u64::try_from(ms).unwrap_or(1)),
                    burst: get(5)?.and_then(|b| u32::try_from(b).ok()).unwrap_or(1),
                };
                Some(TokenBucket::refill(&rate, tokens, refilled_at, at))
            }
            _ => None,
        };
        Ok(Limits {
            paused: row.try_get(0).map_err(Error::database)?,
            max_running: get(1)?,
            per_group: get(2)?,
            bucket,
            at,
        })
    }
}

/// How many groups a fair claim of `limit` jobs offers turns to: `limit` (no claim fills
/// more), or twice that for a limited queue, where groups at their per-group limit get no
/// turn (the statement serves `limit` plus as many as are at their limit).
fn groups_to_serve(limit: u32, limited: bool) -> usize {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    if limited {
        limit.saturating_mul(2)
    } else {
        limit
    }
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
        let statement = self
            .prepare(&client, &self.inner.queries.queue_settings_all)
            .await?;
        let rows = statement
            .query(driver(&client), &[])
            .await
            .map_err(map_pg)?;
        rows.iter().map(queue_settings).collect()
    }

    /// How `queue` is claimed now (refreshing the cache first when stale).
    pub(crate) async fn claim_mode(&self, queue: &str) -> Result<ClaimMode> {
        self.refresh_settings().await?;
        Ok(self.inner.settings.mode(queue))
    }

    /// Claims from a limited queue, combined with this process's concurrent claims of it
    /// (`combine.rs`: one claim at a time per queue and process, for what all of them
    /// asked, the next one starting once the current one has committed), each as
    /// [`Self::claim_limited_alone`] describes.
    pub(crate) async fn claim_limited(
        &self,
        params: &ClaimParams,
        fair: bool,
    ) -> Result<Vec<ClaimedJob>> {
        let claim = |limit: u32, handoff: Handoff| {
            let params = ClaimParams {
                limit,
                ..params.clone()
            };
            async move { self.claim_limited_alone(&params, fair, &handoff).await }
        };
        let release = |jobs: Vec<ClaimedJob>| async move {
            let finishes: Vec<Finish> = jobs.iter().map(|j| Finish::released(j.lease)).collect();
            if let Err(e) = self.job_finish_many(&finishes).await {
                tracing::warn!(error = %e.with_causes(), "releasing jobs claimed for a caller that gave up");
            }
        };
        self.inner.combiner.claim(params, claim, release).await
    }

    /// Claims from a limited queue: locks its settings row (`queue_lock.sql`), works out
    /// how many jobs the rate bucket allows, claims (`job_claim_limited.sql` or
    /// `job_claim_fair.sql`) within the concurrency limits, stores the bucket, commits.
    /// When the claim was cut short by a limit, arms a local wake-up for when there will
    /// be room again.
    ///
    /// The transaction commits without waiting for its WAL flush, so that it holds the
    /// settings row only while it runs ([`LIMITED_CLAIM`]); `handoff` is passed once it has
    /// committed, and the jobs are returned only after `job_claim_flush.sql`, pipelined
    /// behind the COMMIT, has made the claim durable.
    ///
    /// With groups, the groups come from the process's ring (`fair.rs`); when a claim
    /// from the cached ring came back empty without a limit cutting it, the ring is
    /// reloaded and the claim made once more; when it came back short without a limit
    /// cutting it while some groups gave their whole share, those groups are asked for the
    /// rest (as in `claim_fair`).
    async fn claim_limited_alone(
        &self,
        params: &ClaimParams,
        fair: bool,
        handoff: &Handoff,
    ) -> Result<Vec<ClaimedJob>> {
        // Failed or cancelled before its COMMIT, the claim leaves its connection inside the
        // transaction: then the connection leaves the pool.
        let client = TxConnection::new(self.client().await?);
        let mut claimed = self
            .claim_limited_on(&client, params, fair, handoff, None)
            .await?;
        if claimed.look_again {
            self.load_ring(&client, &params.queue).await?;
            claimed = self
                .claim_limited_on(&client, params, fair, handoff, None)
                .await?;
        }
        let conn = &client;
        let jobs = fair::top_up(params.limit, claimed.jobs, claimed.more, |rest, groups| {
            let params = ClaimParams {
                limit: rest,
                ..params.clone()
            };
            async move {
                let claimed = self
                    .claim_limited_on(conn, &params, fair, handoff, Some(groups))
                    .await?;
                Ok((claimed.jobs, claimed.more))
            }
        })
        .await?;
        client.release();
        Ok(jobs)
    }

    /// One limited claim, from the groups of the ring or, with `groups`, from those.
    ///
    /// A queue without a rate limit (by the settings cache) is claimed in one round trip:
    /// BEGIN, the lock, the claim and COMMIT pipelined, the claim checking in SQL that the
    /// locked row has the limits it was given. With a rate limit (the bucket is worked out
    /// here from the locked row), or when the cache was stale, in two: BEGIN and the lock,
    /// then the claim and COMMIT.
    async fn claim_limited_on(
        &self,
        client: &deadpool_postgres::Object,
        params: &ClaimParams,
        fair: bool,
        handoff: &Handoff,
        groups: Option<Vec<String>>,
    ) -> Result<LimitedClaim> {
        let turns = match (fair, groups) {
            (false, _) => None,
            (true, None) => {
                let take = groups_to_serve(params.limit, true);
                let (turns, loaded) = self.fair_turns(client, &params.queue, take).await?;
                if turns.unknown {
                    return Ok(LimitedClaim::default());
                }
                Some((turns, loaded))
            }
            (true, Some(groups)) => {
                let turns = Turns {
                    groups,
                    stray: Vec::new(),
                    stale: false,
                    unknown: false,
                };
                Some((turns, true))
            }
        };
        let q = &self.inner.queries;
        let pooler = self.inner.pooler;
        let lock = pooler
            .prepare(client, &q.queue_lock)
            .await
            .map_err(map_pg)?;
        let now = self.inner.clock.now();
        let lock_args: [&(dyn ToSql + Sync); 2] = [&params.queue, &now];
        let cached = self
            .inner
            .settings
            .get(&params.queue)
            .filter(|s| s.rate.is_none());
        let mut pipelined = None;
        if let Some(cached) = cached {
            let limits = Limits {
                paused: false,
                max_running: cached.max_running.map(as_i32),
                per_group: cached.max_running_per_group.map(as_i32),
                bucket: None,
                at: self.now_or_local(),
            };
            let claim = self.claim_within(
                client,
                params,
                turns.as_ref(),
                &limits,
                params.limit,
                handoff,
            );
            let (begun, row, claimed) = tokio::join!(
                client.batch_execute(LIMITED_CLAIM),
                lock.query_opt(driver(client), &lock_args),
                claim,
            );
            begun.map_err(map_pg)?;
            let row = row.map_err(map_pg)?;
            let claimed = claimed?;
            let Some(row) = row else {
                // The settings row is gone (never happens through hopper): nothing limits it.
                self.inner.settings.invalidate();
                return Ok(LimitedClaim::default());
            };
            let locked = Limits::read(&row)?;
            if locked.paused {
                return Ok(LimitedClaim::default());
            }
            // job_claim_limited.sql reads the concurrency limit from the row itself;
            // job_claim_fair.sql checks the ones it was given against it.
            let settled = !fair
                || (locked.max_running == limits.max_running
                    && locked.per_group == limits.per_group);
            if locked.bucket.is_none() && settled {
                pipelined = Some((claimed, locked, params.limit));
            } else {
                // The cache was stale: nothing was claimed; again with the row's limits.
                self.inner.settings.invalidate();
            }
        }
        let (claimed, limits, allowed) = match pipelined {
            Some(done) => done,
            None => {
                let (begun, row) = tokio::join!(
                    client.batch_execute(LIMITED_CLAIM),
                    lock.query_opt(driver(client), &lock_args),
                );
                begun.map_err(map_pg)?;
                let Some(row) = row.map_err(map_pg)? else {
                    client.batch_execute("COMMIT").await.map_err(map_pg)?;
                    self.inner.settings.invalidate();
                    return Ok(LimitedClaim::default());
                };
                let limits = Limits::read(&row)?;
                if limits.paused {
                    client.batch_execute("COMMIT").await.map_err(map_pg)?;
                    return Ok(LimitedClaim::default());
                }
                let allowed = limits
                    .bucket
                    .map_or(params.limit, |b| b.whole().min(params.limit));
                let claimed = self
                    .claim_within(client, params, turns.as_ref(), &limits, allowed, handoff)
                    .await?;
                (claimed, limits, allowed)
            }
        };
        let n = u32::try_from(claimed.jobs.len()).unwrap_or(u32::MAX);
        let running = claimed.running.unwrap_or(0);
        let max_running = limits.max_running;
        let at_max = max_running.is_some_and(|max| running + i64::from(n) >= i64::from(max));
        let capped = at_max || (fair && limits.per_group.is_some() && n < allowed);
        if let Some(bucket) = limits.bucket
            && n == allowed
            && allowed < params.limit
        {
            // Every token was used and more was wanted: come back for the next one.
            let wait = bucket.next_token_in(n).max(Duration::from_millis(1));
            self.inner.settings.arm(&params.queue, wait);
        } else if capped {
            self.inner.settings.arm(&params.queue, LIMIT_RETRY);
        }
        let look_again = turns
            .as_ref()
            .is_some_and(|(_, loaded)| !loaded && n == 0 && allowed > 0 && !at_max);
        let more = if n < allowed && !at_max {
            claimed.more
        } else {
            Vec::new()
        };
        Ok(LimitedClaim {
            jobs: claimed.jobs,
            look_again,
            more,
        })
    }

    /// Runs the claim statement of a limited queue (`job_claim_fair.sql` with `turns`, else
    /// `job_claim_limited.sql`) for up to `allowed` jobs, then COMMIT, then
    /// `job_claim_flush.sql`, in one pipeline, in the transaction that locks the settings
    /// row (sent behind the lock or after it). Passes `handoff` once COMMIT is done.
    async fn claim_within(
        &self,
        client: &deadpool_postgres::Object,
        params: &ClaimParams,
        turns: Option<&(Turns, bool)>,
        limits: &Limits,
        allowed: u32,
        handoff: &Handoff,
    ) -> Result<Claimed> {
        let allowed = i64::from(allowed);
        let tokens = limits.bucket.map(|b| b.tokens);
        let refill_at = limits.bucket.map(|_| limits.at);
        if let Some((turns, _)) = turns {
            let fair = FairLimits {
                per_group: limits.per_group,
                max_running: limits.max_running,
                tokens,
                refill_at,
                limited: true,
            };
            return self
                .run_fair(client, params, allowed, turns, fair, Some(handoff))
                .await;
        }
        let pooler = self.inner.pooler;
        let claim = pooler
            .prepare(client, &self.inner.queries.job_claim_limited)
            .await
            .map_err(map_pg)?;
        let lease = lease_ms(params.lease);
        let now = self.inner.clock.now();
        let args: [&(dyn ToSql + Sync); 8] = [
            &params.queue,
            &params.node,
            &allowed,
            &lease,
            &now,
            &tokens,
            &refill_at,
            &params.kinds,
        ];
        let flush = pooler
            .prepare(client, &self.inner.queries.job_claim_flush)
            .await
            .map_err(map_pg)?;
        let (rows, committed, flushed) = tokio::join!(
            claim.query(driver(client), &args),
            commit_and_pass(client, handoff),
            flush.execute(driver(client), &[]),
        );
        let rows = rows.map_err(map_pg)?;
        committed.map_err(map_pg)?;
        flushed.map_err(map_pg)?;
        read_claimed(&rows, &self.inner.quarantine)
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
        let max_running = update.max_running.flatten().map(as_i32);
        let per_group = update.max_running_per_group.flatten().map(as_i32);
        let rate = update.rate.flatten();
        let rate_jobs = rate.map(|r| as_i32(r.jobs));
        let rate_ms = rate.map(|r| i32::try_from(r.per.as_millis()).unwrap_or(i32::MAX));
        let rate_burst = rate.map(|r| as_i32(r.burst));
        let args: [&(dyn ToSql + Sync); 10] = [
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
        ];
        let statement = self.text(&self.inner.queries.queue_update);
        let row = self
            .lock_bounded(async |client| statement.query_one(client, &args).await)
            .await?;
        self.inner.settings.invalidate();
        queue_settings(&row)
    }
}

/// Sent before a fair claim of a queue without limits, and [`GENERIC_PLAN_OFF`] after it
/// in the same pipeline: the claim runs with a generic plan. The runtime's outcomes and
/// lease extensions are sent the same way (outcomes.rs, `finish_pooled`, says why).
///
/// Left to itself, PostgreSQL plans these statements anew for every execution (their
/// custom plans look cheaper than the generic one), and planning the fair claim's
/// recursive CTE costs more than running it (measured: 3-6 ms against about 1 ms). The
/// generic plan is the one wanted anyway: every scan is an index range scan fixed by the
/// statement's shape, and the LIMITs are small.
///
/// The claim runs as a statement of its own, not in a transaction block, so that its row
/// locks end with it rather than when the client's COMMIT reaches the server
/// (`docs/benchmarks.md`, "Claim strategies measured"). The
/// RESET keeps the plain claim, on the same pooled connections, unaffected; a claim that
/// fails or is cancelled before it leaves its connection out of the pool (`TxConnection`).
pub(super) const GENERIC_PLAN_ON: &str = "SET plan_cache_mode = force_generic_plan";

/// Sent after a statement that [`GENERIC_PLAN_ON`] preceded.
pub(super) const GENERIC_PLAN_OFF: &str = "RESET plan_cache_mode";

/// Opens the claim transaction of a limited queue: a generic plan ([`GENERIC_PLAN_ON`]),
/// kept to the transaction by `SET LOCAL`, a commit that does not wait for its WAL flush,
/// and a wait of at most 2 s for the queue's settings row.
///
/// The claimers of a limited queue take turns on that row, each holding it for a claim
/// (milliseconds). Another transaction holding it longer (an admin's change left
/// uncommitted) must not stop the claimer for good: `hopper serve` claims for one queue at a
/// time, so every queue's dispatch would wait with it. Past the bound the claim fails
/// (transient, SQLSTATE 55P03) and is tried again later; the other queues are claimed
/// meanwhile.
///
/// The transaction holds the queue's settings row (`queue_lock.sql`) until it ends; with a
/// synchronous commit, through the flush, so that the claims of a limited queue, on every
/// node, could not share flushes: one claim per flush. Committed asynchronously, it lets
/// the next claim have the row as soon as its commit record is written, and the claim is
/// made durable before its jobs are handed out by `job_claim_flush.sql`, a synchronous
/// commit sent behind it on the same connection (see there why that is enough).
const LIMITED_CLAIM: &str = "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan; \
                             SET LOCAL synchronous_commit = off; \
                             SET LOCAL lock_timeout = '2s'";

/// COMMIT, then `handoff` passed (the settings row is free: the next claim may lock it).
pub(super) async fn commit_and_pass(
    client: &deadpool_postgres::Object,
    handoff: &Handoff,
) -> std::result::Result<(), tokio_postgres::Error> {
    client.batch_execute("COMMIT").await?;
    handoff.pass();
    Ok(())
}

fn lease_ms(lease: Duration) -> i32 {
    i32::try_from(lease.as_millis()).unwrap_or(i32::MAX)
}
