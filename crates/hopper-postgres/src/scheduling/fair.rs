//! The fair claim (`job_claim_fair.sql`) with the process's cached ring of groups
//! (`settings/ring.rs`): the groups to serve come from the cache, which is reloaded
//! (`queue_groups_ready.sql`) in the claim's own pipeline when older than
//! [`ring::MAX_AGE`], before the claim when nothing is cached, and at once when a claim
//! from the cached groups came back empty.

use chrono::{DateTime, Utc};
use deadpool_postgres::Object;
use hopper_core::{ClaimParams, ClaimedJob, Error, Result};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::pooled::TxConnection;

use super::combine::Handoff;
use super::{Claimed, commit_and_pass, groups_to_serve, lease_ms, read_claimed};
use crate::PgBackend;
use crate::error::map_pg;
use crate::pooled::generic_plan_brackets;
use crate::settings::ring::{self, Turns};
use crate::statement::driver;

/// The limits a fair claim applies in SQL ($7-$10 and $12 of `job_claim_fair.sql`); all `None`
/// for a queue without limits.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct FairLimits {
    /// Most running jobs per group.
    pub per_group: Option<i32>,
    /// Most running jobs of the queue.
    pub max_running: Option<i32>,
    /// Rate tokens left after the refill (the claimed jobs are taken off in SQL).
    pub tokens: Option<f64>,
    /// The refill instant to store with them.
    pub refill_at: Option<DateTime<Utc>>,
    /// The queue is limited: claim nothing unless its locked settings row has these
    /// limits ($12 of `job_claim_fair.sql`).
    pub limited: bool,
}

impl PgBackend {
    /// Claims from a queue with groups and no limits: `job_claim_fair.sql`, no lock.
    ///
    /// One round trip, like the plain claim (the SET that forces a generic plan, the
    /// claim, a ring reload when due and the RESET are pipelined), plus one to load
    /// the ring when this process has none or its groups had nothing left, and one more
    /// when the claim came back short while some groups gave their whole share.
    pub(crate) async fn claim_fair(&self, params: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        // Failed or cancelled inside its transaction, the connection leaves the pool.
        let client = TxConnection::new(self.client().await?);
        let take = groups_to_serve(params.limit, false);
        let (turns, loaded) = self.fair_turns(&client, &params.queue, take).await?;
        if turns.unknown {
            client.release();
            return Ok(Vec::new());
        }
        let limit = i64::from(params.limit);
        let none = FairLimits::default();
        let mut claimed = self
            .run_fair(&client, params, limit, &turns, none, None)
            .await?;
        if claimed.jobs.is_empty() && !loaded {
            // The cached groups had nothing left: look for groups that appeared since.
            self.load_ring(&client, &params.queue).await?;
            let turns = self.inner.settings.rings.turns(&params.queue, take);
            if turns.unknown {
                client.release();
                return Ok(Vec::new());
            }
            claimed = self
                .run_fair(&client, params, limit, &turns, none, None)
                .await?;
        }
        let conn = &client;
        let jobs = top_up(params.limit, claimed.jobs, claimed.more, |rest, groups| {
            let turns = Turns {
                groups,
                stray: Vec::new(),
                stale: false,
                unknown: false,
            };
            async move {
                let rest = i64::from(rest);
                let claimed = self
                    .run_fair(conn, params, rest, &turns, none, None)
                    .await?;
                Ok((claimed.jobs, claimed.more))
            }
        })
        .await?;
        client.release();
        Ok(jobs)
    }

    /// The turns of a claim of `queue` serving up to `take` groups, loading the ring first
    /// when nothing is cached or the cache says nothing is ready. True when it loaded.
    pub(super) async fn fair_turns(
        &self,
        client: &Object,
        queue: &str,
        take: usize,
    ) -> Result<(Turns, bool)> {
        let rings = &self.inner.settings.rings;
        let turns = rings.turns(queue, take);
        if !turns.unknown {
            return Ok((turns, false));
        }
        self.load_ring(client, queue).await?;
        Ok((rings.turns(queue, take), true))
    }

    /// Loads the ring of `queue` now (`queue_groups_ready.sql`).
    pub(super) async fn load_ring(&self, client: &Object, queue: &str) -> Result<()> {
        let statement = self
            .prepare(client, &self.inner.queries.queue_groups_ready)
            .await?;
        let cursor = self.inner.settings.rings.cursor(queue);
        let row = statement
            .query_one(driver(client), &[&queue, &cursor, &ring::CAP])
            .await
            .map_err(map_pg)?;
        self.store_ring(queue, &row)
    }

    fn store_ring(&self, queue: &str, row: &Row) -> Result<()> {
        let groups: Vec<String> = row.try_get(0).map_err(Error::database)?;
        let stray: Vec<uuid::Uuid> = row.try_get(1).map_err(Error::database)?;
        self.inner.settings.rings.store(queue, groups, stray);
        Ok(())
    }

    /// Runs `job_claim_fair.sql` for up to `allowed` jobs of the groups in `turns`, with a
    /// ring reload pipelined behind it when the ring is stale. Without `limited`, the claim
    /// is a statement of its own between [`GENERIC_PLAN_ON`] and [`GENERIC_PLAN_OFF`], in
    /// the same pipeline; with it, the caller has opened the transaction (the limited
    /// claim, with its lock, committing asynchronously), COMMIT follows the claim,
    /// `limited` is passed once it is done, and `job_claim_flush.sql` follows in the
    /// pipeline to make the claim durable. Moves the cursor to the last
    /// group picked; a claim that got fewer jobs than asked marks the ring stale. A claim
    /// that locked rows it did not take wakes this process's claimers of the queue after
    /// its commit (see `job_claim_fair.sql`).
    pub(super) async fn run_fair(
        &self,
        client: &Object,
        params: &ClaimParams,
        allowed: i64,
        turns: &Turns,
        limits: FairLimits,
        limited: Option<&Handoff>,
    ) -> Result<Claimed> {
        let q = &self.inner.queries;
        let pooler = self.inner.pooler;
        let claim = pooler
            .prepare(client, &q.job_claim_fair)
            .await
            .map_err(map_pg)?;
        let reload = pooler
            .prepare(client, &q.queue_groups_ready)
            .await
            .map_err(map_pg)?;
        let lease = lease_ms(params.lease);
        let now = self.inner.clock.now();
        let args: [&(dyn ToSql + Sync); 13] = [
            &params.queue,
            &params.node,
            &allowed,
            &lease,
            &now,
            &turns.groups,
            &limits.per_group,
            &limits.max_running,
            &limits.tokens,
            &limits.refill_at,
            &turns.stray,
            &limits.limited,
            &params.kinds,
        ];
        let rings = &self.inner.settings.rings;
        let cursor = rings.cursor(&params.queue);
        let reload_args: [&(dyn ToSql + Sync); 3] = [&params.queue, &cursor, &ring::CAP];
        let flush = match limited {
            Some(_) => Some(
                pooler
                    .prepare(client, &q.job_claim_flush)
                    .await
                    .map_err(map_pg)?,
            ),
            None => None,
        };
        // Sent in this order when first polled: SET, claim, reload, RESET (behind a
        // transaction pooler: BEGIN and SET LOCAL, claim, reload, COMMIT); or claim, reload,
        // COMMIT, flush.
        let (before, after) = generic_plan_brackets(pooler);
        let session = driver(client);
        let (begun, rows, reloaded, committed, flushed) = tokio::join!(
            async {
                match limited {
                    None => client.batch_execute(before).await,
                    Some(_) => Ok(()),
                }
            },
            claim.query(session, &args),
            async {
                if turns.stale {
                    reload.query_one(session, &reload_args).await.map(Some)
                } else {
                    Ok(None)
                }
            },
            async {
                match limited {
                    None => client.batch_execute(after).await,
                    Some(handoff) => commit_and_pass(client, handoff).await,
                }
            },
            async {
                match &flush {
                    Some(flush) => flush.execute(session, &[]).await.map(Some),
                    None => Ok(None),
                }
            },
        );
        begun.map_err(map_pg)?;
        let rows = rows.map_err(map_pg)?;
        let reloaded = reloaded.map_err(map_pg)?;
        committed.map_err(map_pg)?;
        flushed.map_err(map_pg)?;
        let claimed = read_claimed(&rows, &self.inner.quarantine)?;
        if claimed.unpicked > 0 {
            // Rows this claim locked but left were skipped by concurrent claims, which may
            // have come back short and stopped claiming: they are free now, say so.
            self.inner.settings.wake(&params.queue);
        }
        if let Some(cursor) = &claimed.cursor {
            rings.set_cursor(&params.queue, cursor.clone());
        }
        match reloaded {
            Some(row) => self.store_ring(&params.queue, &row)?,
            None if i64::try_from(claimed.jobs.len()).unwrap_or(i64::MAX) < allowed => {
                rings.mark_stale(&params.queue);
            }
            None => {}
        }
        Ok(claimed)
    }
}

/// Tops up a fair claim that came back short though some groups gave their whole share
/// (`more`): the others ran dry, and those may have more. The runtime takes a short claim
/// for a drained queue and stops claiming until its poll interval (traced at the end of a
/// W3 drain: the last 1-11 jobs claimed 1 s late in half the runs), so `claim` asks those
/// groups for the rest of `want`, again while it comes back with groups that gave their
/// whole share. Each pass claims at least one job, or the loop ends. Shared by the fair
/// claim and the limited fair claim (`scheduling.rs`).
pub(super) async fn top_up<F, Fut>(
    want: u32,
    mut jobs: Vec<ClaimedJob>,
    mut more: Vec<String>,
    mut claim: F,
) -> Result<Vec<ClaimedJob>>
where
    F: FnMut(u32, Vec<String>) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<ClaimedJob>, Vec<String>)>>,
{
    while !more.is_empty() {
        let rest = want.saturating_sub(u32::try_from(jobs.len()).unwrap_or(u32::MAX));
        if rest == 0 {
            break;
        }
        let (got, next) = claim(rest, more).await?;
        if got.is_empty() {
            break;
        }
        jobs.extend(got);
        more = next;
    }
    Ok(jobs)
}
