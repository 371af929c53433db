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
use hopper_core::{Error, InsertOutcome, JobId, NewJob, Result, UniquePolicy};
use tokio_postgres::{GenericClient, Transaction};

use crate::PgBackend;
use crate::error::map_pg;

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
    async fn mark_grouped(&self, client: &impl GenericClient, jobs: &[NewJob]) -> Result<()> {
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
        self.text(&self.inner.queries.queue_mark_grouped)
            .execute(client, &[&queues])
            .await
            .map_err(map_pg)?;
        for queue in queues {
            self.inner.settings.set_grouped(queue);
        }
        Ok(())
    }

    /// Inserts one job with the full statement on `client` (the caller's transaction or
    /// an autocommit connection), applying its unique policy.
    pub(crate) async fn upsert_one_in(
        &self,
        client: &impl GenericClient,
        job: &NewJob,
    ) -> Result<InsertOutcome> {
        job.validate()?;
        self.mark_grouped(client, std::slice::from_ref(job)).await?;
        let window = job.unique_window_start(job.run_at.unwrap_or_else(|| self.now_or_local()));
        for _ in 0..ATTEMPTS {
            if self.insert_full(client, job, window).await? {
                return Ok(InsertOutcome::Inserted);
            }
            if let Some(outcome) = self.resolve_conflict(client, job, window).await? {
                return Ok(outcome);
            }
        }
        Err(Error::Conflict(format!(
            "job {}: its unique key kept changing hands; try again",
            job.id
        )))
    }

    /// Inserts `jobs` inside `tx`: plain ones with binary COPY, the others (behind a
    /// transaction pooler, all) with one `INSERT … SELECT unnest(…) ON CONFLICT DO
    /// NOTHING`, then applies the unique policy of each job that was not inserted.
    pub(crate) async fn upsert_many_in(
        &self,
        tx: &Transaction<'_>,
        jobs: &[NewJob],
    ) -> Result<Vec<InsertOutcome>> {
        for job in jobs {
            job.validate()?;
        }
        self.mark_grouped(tx, jobs).await?;
        let (full, plain): (Vec<&NewJob>, Vec<&NewJob>) =
            jobs.iter().partition(|j| !self.copies(j));
        if !plain.is_empty() {
            let plain: Vec<NewJob> = plain.into_iter().cloned().collect();
            self.copy_in(tx, &plain).await?;
        }
        // ON CONFLICT would take a repeated id for the first one's (COPY refuses it).
        let mut ids = HashSet::with_capacity(full.len());
        if let Some(twice) = full.iter().find(|j| !ids.insert(j.id)) {
            return Err(Error::Conflict(format!(
                "job id {} appears twice in one insert",
                twice.id
            )));
        }
        let now = self.now_or_local();
        let inserted = self.insert_many_full(tx, &full, now).await?;
        let mut outcomes = Vec::with_capacity(jobs.len());
        for job in jobs {
            if self.copies(job) || inserted.contains(&job.id) {
                outcomes.push(InsertOutcome::Inserted);
                continue;
            }
            let window = job.unique_window_start(job.run_at.unwrap_or(now));
            let mut outcome = self.resolve_conflict(tx, job, window).await?;
            for _ in 1..ATTEMPTS {
                if outcome.is_some() {
                    break;
                }
                outcome = if self.insert_full(tx, job, window).await? {
                    Some(InsertOutcome::Inserted)
                } else {
                    self.resolve_conflict(tx, job, window).await?
                };
            }
            outcomes.push(outcome.ok_or_else(|| {
                Error::Conflict(format!(
                    "job {}: its unique key kept changing hands; try again",
                    job.id
                ))
            })?);
        }
        Ok(outcomes)
    }

    /// `job_insert_full.sql`: true if the job was inserted.
    async fn insert_full(
        &self,
        client: &impl GenericClient,
        job: &NewJob,
        window: Option<DateTime<Utc>>,
    ) -> Result<bool> {
        let row = self
            .text(&self.inner.queries.job_insert_full)
            .query_one(
                client,
                &[
                    &job.id,
                    &job.queue,
                    &job.kind,
                    &job.args,
                    &job.priority.0,
                    &job.run_at,
                    &job.max_attempts,
                    &job.timeout_ms(),
                    &self.inner.clock.now(),
                    &job.group,
                    &job.unique_key,
                    &window,
                ],
            )
            .await
            .map_err(map_pg)?;
        Ok(row.try_get::<_, i64>(0).map_err(Error::database)? == 1)
    }

    /// `job_insert_many_full.sql`: the ids inserted.
    async fn insert_many_full(
        &self,
        client: &impl GenericClient,
        jobs: &[&NewJob],
        now: DateTime<Utc>,
    ) -> Result<HashSet<JobId>> {
        if jobs.is_empty() {
            return Ok(HashSet::new());
        }
        let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
        let queues: Vec<&str> = jobs.iter().map(|j| j.queue.as_str()).collect();
        let kinds: Vec<&str> = jobs.iter().map(|j| j.kind.as_str()).collect();
        let args: Vec<&serde_json::Value> = jobs.iter().map(|j| &j.args).collect();
        let priorities: Vec<i16> = jobs.iter().map(|j| j.priority.0).collect();
        let run_ats: Vec<Option<DateTime<Utc>>> = jobs.iter().map(|j| j.run_at).collect();
        let attempts: Vec<i32> = jobs.iter().map(|j| j.max_attempts).collect();
        let timeouts: Vec<i32> = jobs.iter().map(|j| j.timeout_ms()).collect();
        let groups: Vec<Option<&str>> = jobs.iter().map(|j| j.group.as_deref()).collect();
        let keys: Vec<Option<&str>> = jobs.iter().map(|j| j.unique_key.as_deref()).collect();
        let windows: Vec<Option<DateTime<Utc>>> = jobs
            .iter()
            .map(|j| j.unique_window_start(j.run_at.unwrap_or(now)))
            .collect();
        let rows = self
            .text(&self.inner.queries.job_insert_many_full)
            .query(
                client,
                &[
                    &ids,
                    &queues,
                    &kinds,
                    &args,
                    &priorities,
                    &run_ats,
                    &attempts,
                    &timeouts,
                    &groups,
                    &keys,
                    &windows,
                    &self.inner.clock.now(),
                ],
            )
            .await
            .map_err(map_pg)?;
        rows.iter()
            .map(|r| r.try_get(0).map_err(Error::database))
            .collect()
    }

    /// A job was not inserted: finds who holds its key and applies its policy. `None`
    /// when nobody holds it any more (the caller inserts again).
    async fn resolve_conflict(
        &self,
        client: &impl GenericClient,
        job: &NewJob,
        window: Option<DateTime<Utc>>,
    ) -> Result<Option<InsertOutcome>> {
        let Some(key) = &job.unique_key else {
            return Err(Error::Conflict(format!("a job with id {} exists", job.id)));
        };
        let Some(row) = self
            .text(&self.inner.queries.job_unique_holder)
            .query_opt(client, &[key, &window])
            .await
            .map_err(map_pg)?
        else {
            return Ok(None);
        };
        let holder: JobId = row.try_get(0).map_err(Error::database)?;
        let state: String = row.try_get(1).map_err(Error::database)?;
        match job.unique_policy {
            UniquePolicy::Ignore => Ok(Some(InsertOutcome::Duplicate { existing: holder })),
            UniquePolicy::Reject => Err(Error::Conflict(format!(
                "unique key {key:?} is held by job {holder} ({state})"
            ))),
            UniquePolicy::Replace => {
                let replaced = self
                    .text(&self.inner.queries.job_replace)
                    .query_opt(
                        client,
                        &[
                            &holder,
                            &job.kind,
                            &job.args,
                            &job.priority.0,
                            &job.run_at,
                            &job.max_attempts,
                            &job.timeout_ms(),
                            &job.group,
                            &self.inner.clock.now(),
                        ],
                    )
                    .await
                    .map_err(map_pg)?;
                Ok(Some(match replaced {
                    Some(_) => InsertOutcome::Replaced { existing: holder },
                    None => InsertOutcome::Duplicate { existing: holder },
                }))
            }
        }
    }
}
