//! Writing outcomes on a pooled connection: one statement per kind of outcome present
//! (`job_complete_many.sql`, `job_fail_many.sql`, `job_snooze_many.sql`), each over the
//! whole batch, pipelined in one round trip with a generic plan.
//!
//! A job row another transaction holds (an open `SELECT … FOR UPDATE`, an admin's change
//! left uncommitted) must not stop the batch, nor the batches queued behind it: the other
//! jobs' outcomes would wait as long as the holder, and a hold longer than their leases
//! would have the rescuer run them again. So the first try waits at most 100 ms for a row
//! lock (`lock_wait!`). A statement that timed out is written again the way around held rows
//! ([`PgBackend::write_around_held`]): one transaction locks the rows, skipping the held
//! ones (`job_lock_running.sql`), and writes the others; a held row's outcome is answered
//! [`FinishResult::Held`], for the caller to write again later. Skipping held rows is the
//! second try only because it costs every job a row lock, its WAL record and a second
//! probe of the primary key (figures in docs/benchmarks.md).

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use hopper_core::limits::MAX_ERROR_HISTORY;
use hopper_core::{Error, Finish, FinishResult, JobId, JobState, Lease, Outcome, Result};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::PgBackend;
use crate::error::{lock_not_granted, map_pg};
use crate::hot::millis;
use crate::pooled::{TxConnection, bracketed};
use crate::statement::{Pooler, Query, Ready, driver};

/// What is sent before the first try: a generic plan ([`PgBackend::finish_pooled`] says
/// why) and row-lock waits bounded (`lock_wait!`); a session setting, or behind a
/// transaction pooler `SET LOCAL` in a transaction (pooled.rs, `generic_plan_brackets`).
fn before_first_try(pooler: Pooler) -> &'static str {
    match pooler {
        Pooler::None => concat!(
            "SET plan_cache_mode = force_generic_plan; SET lock_timeout = '",
            lock_wait!(),
            "'"
        ),
        Pooler::Transaction => AROUND_HELD_BEGIN,
    }
}

/// What is sent after the first try: the session settings undone (the lock bound back to
/// `pool_lock_timeout`, the pool's own, when it has one: [`crate::PgOptions::lock_timeout`]),
/// or behind a transaction pooler the transaction's end.
pub(crate) fn after_first_try(pooler: Pooler, pool_lock_timeout: Option<&str>) -> String {
    match (pooler, pool_lock_timeout) {
        (Pooler::None, None) => "RESET plan_cache_mode; RESET lock_timeout".to_owned(),
        (Pooler::None, Some(t)) => format!("RESET plan_cache_mode; SET lock_timeout = '{t}'"),
        (Pooler::Transaction, _) => "COMMIT".to_owned(),
    }
}

/// Opens the transaction of the way around held rows, with the first try's settings. The
/// bound stays: `SKIP LOCKED` skips row locks, not a table's (an `ALTER TABLE` running),
/// which ends the try with a transient error instead of a wait.
const AROUND_HELD_BEGIN: &str = concat!(
    "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan; SET LOCAL lock_timeout = '",
    lock_wait!(),
    "'"
);

/// A lease as the statements return it: (job id, attempt).
type Key = (JobId, i32);

/// One statement's answer: its rows, or the server's error.
type Answer = std::result::Result<Vec<Row>, tokio_postgres::Error>;

/// The statement that writes an outcome, in the order the three are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Done,
    Failed,
    Snoozed,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Done, Kind::Failed, Kind::Snoozed];

    fn of(outcome: &Outcome) -> Kind {
        match outcome {
            Outcome::Completed { .. } => Kind::Done,
            Outcome::Retry { .. } | Outcome::Failed { .. } => Kind::Failed,
            Outcome::Snoozed { .. } | Outcome::Released => Kind::Snoozed,
        }
    }
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
    fn new<'f>(finishes: impl Iterator<Item = &'f Finish>) -> Self {
        let mut s = Split::default();
        let mut in_order: Vec<&Finish> = finishes.collect();
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
        self.failed
            .errors
            .push(hopper_core::limits::bounded_error(error).into_owned());
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
    /// Records many outcomes on a pooled connection (see the module docs). One entry per
    /// input, in order.
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
        let now = self.inner.clock.now();
        let pooler = self.inner.pooler;
        let s = Split::new(finishes.iter());
        let ready = self.ready(&client, &s).await?;
        let work = run_split(&client, ready, &s, &now);
        let brackets = (before_first_try(pooler), self.inner.outcomes_after.as_str());
        let answers = bracketed(&client, brackets, work).await?;
        let timed_out = answers
            .iter()
            .any(|a| a.as_ref().is_err_and(lock_not_granted));
        let mut recorded: HashMap<Key, JobState> = HashMap::new();
        let mut again: Vec<&Finish> = Vec::new();
        for (kind, answer) in Kind::ALL.into_iter().zip(answers) {
            match answer {
                // Behind a transaction pooler the three share a transaction, which a
                // timeout rolled back whole: every kind goes again.
                Ok(_) | Err(_) if timed_out && pooler == Pooler::Transaction => {
                    again.extend(finishes.iter().filter(|f| Kind::of(&f.outcome) == kind));
                }
                Ok(rows) => record(kind, &rows, &mut recorded)?,
                // Each statement is its own transaction: only the one that timed out goes
                // again (the others are written).
                Err(e) if lock_not_granted(&e) => {
                    again.extend(finishes.iter().filter(|f| Kind::of(&f.outcome) == kind));
                }
                Err(e) => return Err(map_pg(e)),
            }
        }
        let held = match again.is_empty() {
            true => HashSet::new(),
            false => {
                self.write_around_held(&client, &again, &now, &mut recorded)
                    .await?
            }
        };
        client.release();
        Ok(finishes
            .iter()
            .map(|f| {
                let key = (f.lease.job_id, f.lease.attempt);
                match recorded.get(&key) {
                    Some(state) => FinishResult::Recorded(*state),
                    None if held.contains(&key) => FinishResult::Held,
                    None => FinishResult::LeaseLost,
                }
            })
            .collect())
    }

    /// Writes `finishes`, whose first try timed out on a row lock, in one transaction that
    /// waits on no row: `job_lock_running.sql` locks their rows, skipping the ones another
    /// transaction holds, and the statements write the rest. Returns the held leases; the
    /// written ones go into `recorded`. Failed midway, the connection is closed with its
    /// transaction (the caller's guard).
    async fn write_around_held(
        &self,
        client: &TxConnection,
        finishes: &[&Finish],
        now: &Option<DateTime<Utc>>,
        recorded: &mut HashMap<Key, JobState>,
    ) -> Result<HashSet<Key>> {
        let mut leases: Vec<Lease> = finishes.iter().map(|f| f.lease).collect();
        leases.sort_unstable_by_key(|l| l.job_id);
        let ids: Vec<JobId> = leases.iter().map(|l| l.job_id).collect();
        let attempts: Vec<i32> = leases.iter().map(|l| l.attempt).collect();
        let probe = self.inner.pooler.text(&self.inner.queries.job_lock_running);
        let args: [&(dyn ToSql + Sync); 2] = [&ids, &attempts];
        let (began, rows) = tokio::join!(
            client.batch_execute(AROUND_HELD_BEGIN),
            probe.query(driver(client), &args),
        );
        began.map_err(map_pg)?;
        let mut held = HashSet::new();
        for row in rows.map_err(map_pg)? {
            let id: JobId = row.try_get(0).map_err(Error::database)?;
            let attempt: i32 = row.try_get(1).map_err(Error::database)?;
            held.insert((id, attempt));
        }
        let rest = Split::new(
            finishes
                .iter()
                .copied()
                .filter(|f| !held.contains(&(f.lease.job_id, f.lease.attempt))),
        );
        let ready = self.ready(client, &rest).await?;
        let (answers, committed) = tokio::join!(
            run_split(client, ready, &rest, now),
            client.batch_execute("COMMIT"),
        );
        for (kind, answer) in Kind::ALL.into_iter().zip(answers) {
            record(kind, &answer.map_err(map_pg)?, recorded)?;
        }
        committed.map_err(map_pg)?;
        Ok(held)
    }

    /// The statements `s` needs, ready on `client` (prepared and cached per connection, or
    /// unnamed), in [`Kind::ALL`]'s order; `None` for a kind the batch has none of.
    async fn ready<'q>(
        &'q self,
        client: &'q TxConnection,
        s: &Split,
    ) -> Result<[Option<Ready<'q>>; 3]> {
        let q = &self.inner.queries;
        let pooler = self.inner.pooler;
        Ok([
            prepare_if(pooler, client, !s.done.ids.is_empty(), &q.job_complete_many).await?,
            prepare_if(pooler, client, !s.failed.ids.is_empty(), &q.job_fail_many).await?,
            prepare_if(
                pooler,
                client,
                !s.snoozed.ids.is_empty(),
                &q.job_snooze_many,
            )
            .await?,
        ])
    }
}

/// Runs the statements `ready` over `s`, pipelined: each one's answer, in [`Kind::ALL`]'s
/// order. Without a pooler each runs as its own transaction, so one failing leaves the
/// others written.
async fn run_split(
    client: &TxConnection,
    ready: [Option<Ready<'_>>; 3],
    s: &Split,
    now: &Option<DateTime<Utc>>,
) -> [Answer; 3] {
    let [done, failed, snoozed] = ready;
    let f = &s.failed;
    let done_args: [&(dyn ToSql + Sync); 4] =
        [&s.done.ids, &s.done.attempts, &s.done.duration_ms, now];
    let failed_args: [&(dyn ToSql + Sync); 8] = [
        &f.ids,
        &f.attempts,
        &f.errors,
        &f.retry_ms,
        &f.dead,
        &f.duration_ms,
        now,
        &MAX_ERROR_HISTORY,
    ];
    let snoozed_args: [&(dyn ToSql + Sync); 4] = [
        &s.snoozed.ids,
        &s.snoozed.attempts,
        &s.snoozed.retry_ms,
        now,
    ];
    let (done, failed, snoozed) = tokio::join!(
        query_if(client, done, &done_args),
        query_if(client, failed, &failed_args),
        query_if(client, snoozed, &snoozed_args),
    );
    [done, failed, snoozed]
}

/// Reads the rows one statement returned into `recorded`, keyed by lease: one batch may
/// hold a stale and a current lease of one job, and only the attempt the row matched was
/// honoured. `job_complete_many.sql` returns `(id, attempt)`; the others `(id, state,
/// queue, attempt)`.
fn record(kind: Kind, rows: &[Row], recorded: &mut HashMap<Key, JobState>) -> Result<()> {
    for row in rows {
        let (key, state) = match kind {
            Kind::Done => (
                (
                    row.try_get(0).map_err(Error::database)?,
                    row.try_get(1).map_err(Error::database)?,
                ),
                JobState::Completed,
            ),
            Kind::Failed | Kind::Snoozed => {
                let state: String = row.try_get(1).map_err(Error::database)?;
                (
                    (
                        row.try_get(0).map_err(Error::database)?,
                        row.try_get(3).map_err(Error::database)?,
                    ),
                    state.parse()?,
                )
            }
        };
        recorded.insert(key, state);
    }
    Ok(())
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
