//! The hot path: claiming jobs of a plain queue and writing outcomes, on a pooled client or
//! inside a caller's transaction (anything that is a [`GenericClient`]).
//!
//! Writing the waiting outcomes in the next claim's transaction (one commit for both) was
//! measured and lost: see job_claim.sql.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use deadpool_postgres::Object;
use hopper_core::{
    ClaimParams, ClaimedJob, Error, Finish, FinishResult, JobId, JobState, Lease, Outcome, Result,
};

use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::PgBackend;
use crate::cursor::Start;
use crate::error::map_pg;
use crate::poison::Poisoned;
use crate::pooled::{TxConnection, generic_plan};
use crate::scheduling::{claimed_job, in_claim_order};
use crate::statement::{Pooler, Query, Ready, driver};

/// The column of job_claim.sql's rows that says when the row was written (the next one:
/// when the statement started).
const CLAIM_WRITTEN_AT: usize = 12;

/// Milliseconds as the SQL files take them.
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A batch of outcomes, split by the statement that writes each kind, as the columns
/// each statement unnests.
#[derive(Default)]
struct Split {
    done: Columns,
    failed: Columns,
    snoozed: Columns,
}

/// One statement's input columns (the ones it does not take stay empty).
#[derive(Default)]
struct Columns {
    ids: Vec<JobId>,
    attempts: Vec<i32>,
    errors: Vec<String>,
    retry_ms: Vec<i64>,
    dead: Vec<bool>,
    duration_ms: Vec<i64>,
}

impl Columns {
    fn push(&mut self, lease: &Lease) {
        self.ids.push(lease.job_id);
        self.attempts.push(lease.attempt);
    }
}

impl Split {
    /// The columns in job id order: each statement then locks its rows in that order, as
    /// `job_extend_many` does, so a lease extension and an outcome over the same rows
    /// (different connections of one process) queue instead of deadlocking. Behind a
    /// transaction pooler the three statements share one transaction, whose locks are in
    /// order within each statement only.
    fn new(finishes: &[Finish]) -> Self {
        let mut s = Split::default();
        let mut in_order: Vec<&Finish> = finishes.iter().collect();
        in_order.sort_unstable_by_key(|f| f.lease.job_id);
        for f in in_order {
            match &f.outcome {
                Outcome::Completed { duration_ms } => {
                    s.done.push(&f.lease);
                    s.done.duration_ms.push(*duration_ms);
                }
                Outcome::Retry {
                    error,
                    retry_in,
                    duration_ms,
                } => s.fail(&f.lease, error, millis(*retry_in), false, *duration_ms),
                Outcome::Failed { error, duration_ms } => {
                    s.fail(&f.lease, error, 0, true, *duration_ms);
                }
                Outcome::Snoozed { retry_in } => s.snooze(&f.lease, millis(*retry_in)),
                Outcome::Released => s.snooze(&f.lease, 0),
            }
        }
        s
    }

    fn fail(&mut self, lease: &Lease, error: &str, retry_ms: i64, dead: bool, ms: i64) {
        self.failed.push(lease);
        self.failed.errors.push(error.to_owned());
        self.failed.retry_ms.push(retry_ms);
        self.failed.dead.push(dead);
        self.failed.duration_ms.push(ms);
    }

    fn snooze(&mut self, lease: &Lease, retry_ms: i64) {
        self.snoozed.push(lease);
        self.snoozed.retry_ms.push(retry_ms);
    }
}

impl PgBackend {
    /// Claims from a queue that uses no scheduling feature (job_claim.sql), from the head of
    /// the claim index or after this process's cursor for the queue (`cursor.rs`).
    pub(crate) async fn claim_plain(
        &self,
        client: &Object,
        params: &ClaimParams,
    ) -> Result<Vec<ClaimedJob>> {
        let cursors = &self.inner.cursors;
        let start = cursors.start(&params.queue, self.now_or_local());
        let began = Instant::now();
        let result = self.claim_plain_from(client, params, start).await;
        let limit = usize::try_from(params.limit).unwrap_or(usize::MAX);
        let (jobs, took) = match &result {
            Ok((jobs, took)) => (Some(jobs.as_slice()), took.unwrap_or(began.elapsed())),
            Err(_) => (None, began.elapsed()),
        };
        cursors.finish(&params.queue, start, limit, jobs, took, self.now_or_local());
        result.map(|(jobs, _)| jobs)
    }

    /// Claims from a plain queue only jobs of `kinds` (job_claim.sql with `$9`), from the head
    /// of the claim index. The claim cursor is neither used nor moved: it tracks the order
    /// of the plain claims.
    pub(crate) async fn claim_kinds(
        &self,
        client: &Object,
        params: &ClaimParams,
        kinds: &[String],
    ) -> Result<Vec<ClaimedJob>> {
        let statement = self.prepare(client, &self.inner.queries.job_claim).await?;
        let limit = i64::from(params.limit);
        let lease_ms = i32::try_from(params.lease.as_millis()).unwrap_or(i32::MAX);
        let now = self.inner.clock.now();
        let no_cursor: (Option<i16>, Option<DateTime<Utc>>, Option<JobId>) = (None, None, None);
        let rows = statement
            .query(
                driver(client),
                &[
                    &params.queue,
                    &params.node,
                    &limit,
                    &lease_ms,
                    &now,
                    &no_cursor.0,
                    &no_cursor.1,
                    &no_cursor.2,
                    &kinds,
                ],
            )
            .await
            .map_err(map_pg)?;
        let mut jobs: Vec<ClaimedJob> = rows
            .iter()
            .map(|row| claimed_job(row, 0))
            .collect::<Result<_>>()?;
        in_claim_order(&mut jobs);
        Ok(jobs)
    }

    /// Runs job_claim.sql from `start`: the jobs, and how long the statement had run when
    /// it wrote its last row (`None` when it claimed nothing).
    async fn claim_plain_from(
        &self,
        client: &Object,
        params: &ClaimParams,
        start: Start,
    ) -> Result<(Vec<ClaimedJob>, Option<Duration>)> {
        let statement = self.prepare(client, &self.inner.queries.job_claim).await?;
        let limit = i64::from(params.limit);
        let lease_ms = i32::try_from(params.lease.as_millis()).unwrap_or(i32::MAX);
        let now = self.inner.clock.now();
        let after = match start {
            Start::After(key) => Some(key),
            Start::Head { .. } => None,
        };
        let rows = statement
            .query(
                driver(client),
                &[
                    &params.queue,
                    &params.node,
                    &limit,
                    &lease_ms,
                    &now,
                    &after.map(|k| k.priority),
                    &after.map(|k| k.run_at),
                    &after.map(|k| k.id),
                    &None::<Vec<String>>,
                ],
            )
            .await
            .map_err(map_pg)?;
        // Rows are written one after the other: the last one says how long the statement
        // had run by then.
        let took = match rows.last() {
            Some(row) => {
                let written: DateTime<Utc> =
                    row.try_get(CLAIM_WRITTEN_AT).map_err(Error::database)?;
                let started: DateTime<Utc> =
                    row.try_get(CLAIM_WRITTEN_AT + 1).map_err(Error::database)?;
                Some((written - started).to_std().unwrap_or_default())
            }
            None => None,
        };
        let mut jobs: Vec<ClaimedJob> = Vec::with_capacity(rows.len());
        for row in &rows {
            match claimed_job(row, 0) {
                Ok(job) => jobs.push(job),
                Err(e) => self.inner.quarantine.hold(Poisoned::of(row, 0, &e)?),
            }
        }
        in_claim_order(&mut jobs);
        Ok((jobs, took))
    }

    /// Records many outcomes on a pooled connection: one statement per kind of outcome
    /// present, each over the whole batch, pipelined in one round trip with a generic plan
    /// ([`generic_plan`]). One entry per input, in order.
    ///
    /// The generic plan, because the custom one goes wrong: the batch's size is known to
    /// the planner then (1,000 rows), the running rows' is guessed (0.5% of the table), and
    /// with the default page costs a hash join over a sequential scan of the whole table
    /// looks cheaper than 1,000 primary-key probes. On a table of 100,000 jobs it took 30-40
    /// ms against 8 (auto_explain during W3: 17 of 143 outcome statements). The generic
    /// plan guesses 10 input rows and always probes the primary key per row.
    pub(crate) async fn finish_pooled(
        &self,
        client: TxConnection,
        finishes: &[Finish],
    ) -> Result<Vec<FinishResult>> {
        let q = &self.inner.queries;
        let now = self.inner.clock.now();
        let s = Split::new(finishes);
        let pooler = self.inner.pooler;
        let done = prepare_if(
            pooler,
            &client,
            !s.done.ids.is_empty(),
            &q.job_complete_many,
        )
        .await?;
        let failed =
            prepare_if(pooler, &client, !s.failed.ids.is_empty(), &q.job_fail_many).await?;
        let snoozed = prepare_if(
            pooler,
            &client,
            !s.snoozed.ids.is_empty(),
            &q.job_snooze_many,
        )
        .await?;
        let f = &s.failed;
        let done_args: [&(dyn ToSql + Sync); 4] =
            [&s.done.ids, &s.done.attempts, &s.done.duration_ms, &now];
        let failed_args: [&(dyn ToSql + Sync); 7] = [
            &f.ids,
            &f.attempts,
            &f.errors,
            &f.retry_ms,
            &f.dead,
            &f.duration_ms,
            &now,
        ];
        let snoozed_args: [&(dyn ToSql + Sync); 4] = [
            &s.snoozed.ids,
            &s.snoozed.attempts,
            &s.snoozed.retry_ms,
            &now,
        ];
        let statements = async {
            tokio::try_join!(
                query_if(&client, done, &done_args),
                query_if(&client, failed, &failed_args),
                query_if(&client, snoozed, &snoozed_args),
            )
        };
        let (done, failed, snoozed) = generic_plan(&client, pooler, statements).await?;
        client.release();
        let mut recorded: HashMap<(JobId, i32), JobState> = HashMap::new();
        for row in done {
            let key = (
                row.try_get(0).map_err(Error::database)?,
                row.try_get(1).map_err(Error::database)?,
            );
            recorded.insert(key, JobState::Completed);
        }
        record_states(&failed, &mut recorded)?;
        record_states(&snoozed, &mut recorded)?;
        Ok(finishes
            .iter()
            .map(|f| match recorded.get(&(f.lease.job_id, f.lease.attempt)) {
                Some(state) => FinishResult::Recorded(*state),
                None => FinishResult::LeaseLost,
            })
            .collect())
    }
}

/// `query` ready to run on `client` (prepared and cached per connection, or unnamed) if
/// `needed`.
async fn prepare_if<'q>(
    pooler: Pooler,
    client: &'q TxConnection,
    needed: bool,
    query: &'q Query,
) -> Result<Option<Ready<'q>>> {
    match needed {
        true => pooler
            .prepare(client, query)
            .await
            .map(Some)
            .map_err(map_pg),
        false => Ok(None),
    }
}

/// Runs `statement` if there is one; no rows if not.
async fn query_if(
    client: &TxConnection,
    statement: Option<Ready<'_>>,
    args: &[&(dyn ToSql + Sync)],
) -> std::result::Result<Vec<Row>, tokio_postgres::Error> {
    match statement {
        Some(statement) => statement.query(driver(client), args).await,
        None => Ok(Vec::new()),
    }
}

/// Reads `(id, state, queue, attempt)` rows returned by an outcome statement into
/// `recorded`, keyed by lease: one batch may hold a stale and a current lease of one job,
/// and only the attempt the row matched was honoured.
fn record_states(rows: &[Row], recorded: &mut HashMap<(JobId, i32), JobState>) -> Result<()> {
    for row in rows {
        let state: String = row.try_get(1).map_err(Error::database)?;
        let key = (
            row.try_get(0).map_err(Error::database)?,
            row.try_get(3).map_err(Error::database)?,
        );
        recorded.insert(key, state.parse()?);
    }
    Ok(())
}
