//! Inserting jobs with group keys and unique keys.
//!
//! Plain jobs keep their fast paths (`job_insert.sql`, binary COPY). A job with a unique
//! key cannot go through COPY, which has no `ON CONFLICT`: it goes through
//! `job_insert_full.sql` / `job_insert_many_full.sql` (`INSERT … ON CONFLICT DO
//! NOTHING`). The unique indexes decide who wins between concurrent inserters; the loser
//! then finds the holder (`job_unique_holder.sql`) and applies its policy. Nothing here
//! checks first and inserts second, so there is no window for a race.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use hopper_core::{Error, InsertOutcome, NewJob, Result, UniquePolicy, policy};
use tokio_postgres::Transaction;

use crate::PgBackend;
use crate::conn::{Columns, Conn, Holder, Tokio};

/// How many times a job whose key holder vanished between the insert and the lookup is
/// tried again before giving up.
const ATTEMPTS: usize = 5;

impl PgBackend {
    /// True when `job` needs the full insert: a group, a unique key, or a queue with groups
    /// (its jobs without a group join the group '').
    pub(crate) fn needs_full_insert(&self, job: &NewJob) -> bool {
        job.needs_upsert() || self.inner.settings.is_grouped(&job.queue)
    }

    /// True when a bulk insert writes `job` with binary COPY: it needs no full insert, and
    /// no transaction pooler stands in the way (COPY needs a named statement: `copy.rs`).
    fn copies(&self, job: &NewJob) -> bool {
        !self.inner.pooler.unnamed() && !self.needs_full_insert(job)
    }

    /// Marks the queues of `jobs` that get their first grouped job as grouped.
    async fn mark_grouped(&self, conn: &mut impl Conn, jobs: &[NewJob]) -> Result<()> {
        let mut queues: Vec<&str> = Vec::new();
        for job in jobs.iter().filter(|j| j.group.is_some()) {
            if !self.inner.settings.is_grouped(&job.queue) && !queues.contains(&job.queue.as_str())
            {
                queues.push(&job.queue);
            }
        }
        if queues.is_empty() {
            return Ok(());
        }
        conn.mark_grouped(&queues).await?;
        for queue in queues {
            self.inner.settings.set_grouped(queue);
        }
        Ok(())
    }

    /// Inserts one job with the full statement on `conn` (the caller's transaction or
    /// an autocommit connection), applying its unique policy.
    pub(crate) async fn upsert_one_in(
        &self,
        conn: &mut impl Conn,
        job: &NewJob,
    ) -> Result<InsertOutcome> {
        job.validate()?;
        self.mark_grouped(conn, std::slice::from_ref(job)).await?;
        let window = job.unique_window_start(job.run_at.unwrap_or_else(|| self.now_or_local()));
        for _ in 0..ATTEMPTS {
            if conn
                .insert_full(job, self.inner.clock.now(), window)
                .await?
            {
                return Ok(InsertOutcome::Inserted);
            }
            let jobs = std::slice::from_ref(job);
            if let Some(outcome) = self.resolve_conflict(conn, jobs, 0, window).await? {
                return Ok(outcome);
            }
        }
        Err(kept_changing_hands(job))
    }

    /// Inserts `jobs` inside `tx`: plain ones with binary COPY, the others (behind a
    /// transaction pooler, all) with one `INSERT … SELECT unnest(…) ON CONFLICT DO
    /// NOTHING`, then applies the unique policy of each job that was not inserted.
    pub(crate) async fn upsert_many_in(
        &self,
        tx: &Transaction<'_>,
        jobs: &[NewJob],
    ) -> Result<Vec<InsertOutcome>> {
        let mut conn = Tokio {
            backend: self,
            client: tx,
        };
        self.prepare_many(&mut conn, jobs).await?;
        let plain: Vec<NewJob> = jobs.iter().filter(|j| self.copies(j)).cloned().collect();
        if !plain.is_empty() {
            self.copy_in(tx, &plain).await?;
        }
        self.insert_rest(&mut conn, jobs, |job| self.copies(job))
            .await
    }

    /// Validates `jobs` and marks the queues that get their first grouped job.
    pub(crate) async fn prepare_many(&self, conn: &mut impl Conn, jobs: &[NewJob]) -> Result<()> {
        for job in jobs {
            job.validate()?;
        }
        self.mark_grouped(conn, jobs).await
    }

    /// Inserts the `jobs` not `copied` already with one `INSERT … SELECT unnest(…) ON
    /// CONFLICT DO NOTHING`, then applies the unique policy of each job that was not
    /// inserted. Says what became of every job, in order.
    pub(crate) async fn insert_rest(
        &self,
        conn: &mut impl Conn,
        jobs: &[NewJob],
        copied: impl Fn(&NewJob) -> bool,
    ) -> Result<Vec<InsertOutcome>> {
        let full: Vec<&NewJob> = jobs.iter().filter(|j| !copied(j)).collect();
        // ON CONFLICT would take a repeated id for the first one's (COPY refuses it).
        let mut ids = HashSet::with_capacity(full.len());
        if let Some(twice) = full.iter().find(|j| !ids.insert(j.id)) {
            return Err(Error::Conflict(format!(
                "job id {} appears twice in one insert",
                twice.id
            )));
        }
        let now = self.now_or_local();
        let inserted = if full.is_empty() {
            HashSet::new()
        } else {
            conn.insert_many_full(&Columns::of(&full, now, self.inner.clock.now()))
                .await?
        };
        let mut outcomes = Vec::with_capacity(jobs.len());
        for (index, job) in jobs.iter().enumerate() {
            if copied(job) || inserted.contains(&job.id) {
                outcomes.push(InsertOutcome::Inserted);
                continue;
            }
            let window = job.unique_window_start(job.run_at.unwrap_or(now));
            let mut outcome = self.resolve_conflict(conn, jobs, index, window).await?;
            for _ in 1..ATTEMPTS {
                if outcome.is_some() {
                    break;
                }
                outcome = if conn
                    .insert_full(job, self.inner.clock.now(), window)
                    .await?
                {
                    Some(InsertOutcome::Inserted)
                } else {
                    self.resolve_conflict(conn, jobs, index, window).await?
                };
            }
            outcomes.push(outcome.ok_or_else(|| kept_changing_hands(job))?);
        }
        Ok(outcomes)
    }

    /// `jobs[index]` was not inserted: finds who holds its key and applies its policy.
    /// `None` when nobody holds it any more (the caller inserts again).
    async fn resolve_conflict(
        &self,
        conn: &mut impl Conn,
        jobs: &[NewJob],
        index: usize,
        window: Option<DateTime<Utc>>,
    ) -> Result<Option<InsertOutcome>> {
        let Some(job) = jobs.get(index) else {
            return Ok(None);
        };
        let Some(key) = &job.unique_key else {
            return Err(id_taken(job));
        };
        let Some(Holder {
            id: holder,
            state,
            holds_key,
        }) = conn.unique_holder(job, window).await?
        else {
            return Ok(None);
        };
        if !holds_key {
            return Err(id_taken(job));
        }
        match job.unique_policy {
            UniquePolicy::Ignore => Ok(Some(InsertOutcome::Duplicate { existing: holder })),
            UniquePolicy::Reject => {
                Err(policy::unique_key_rejected(jobs, index, key, holder, state))
            }
            UniquePolicy::Replace => {
                let replaced = conn.replace(holder, job, self.inner.clock.now()).await?;
                Ok(Some(if replaced {
                    InsertOutcome::Replaced { existing: holder }
                } else {
                    InsertOutcome::Duplicate { existing: holder }
                }))
            }
        }
    }
}

/// The error of a job whose id is taken.
fn id_taken(job: &NewJob) -> Error {
    Error::Conflict(format!("a job with id {} already exists", job.id))
}

/// The error of a job whose unique key changed hands at every attempt.
fn kept_changing_hands(job: &NewJob) -> Error {
    Error::Conflict(format!(
        "job {}: its unique key kept changing hands; try again",
        job.id
    ))
}
