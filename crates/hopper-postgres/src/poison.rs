//! Rows hopper cannot read, and what becomes of them.
//!
//! A row may hold what hopper's types cannot decode: an infinite `run_at` written into the
//! table by hand, an instant beyond what chrono reads, an error history from an older
//! version or a bug. Such a row must never stop anything else, so every path that reads
//! jobs decodes them one by one, and hands the rows that fail to [`PgBackend::quarantine`]:
//! they are moved to `failed`, the decode error appended to their error history, and the
//! unreadable columns replaced (`job_quarantine.sql`), so that they can be read, shown
//! and retried by hand from then on.
//!
//! - A claim keeps the jobs it could read and holds the others ([`Quarantine::hold`]);
//!   they are moved once the claim has returned (its transaction committed, its locks
//!   released), so that a due `-infinity` job does not strand the rest of its claim.
//! - The promoter, when the next due time cannot be read, moves the scheduled jobs whose
//!   `run_at` lies outside the range of `hopper_core::limits` and carries on.
//! - Listing, showing and searching move the rows they could not read, then read them again.

use std::sync::Mutex;

use hopper_core::error::LockNotGranted;
use hopper_core::{AttemptError, Error, JobId, JobRecord, Result};
use tokio_postgres::Row;

use crate::PgBackend;
use crate::error::map_pg;
use crate::rows;

/// A job whose row could not be read, and why.
#[derive(Debug, Clone)]
pub(crate) struct Poisoned {
    /// The job.
    pub id: JobId,
    /// The decode error, as its error history will show it.
    pub reason: String,
}

impl Poisoned {
    /// The job of `row` (its id in column `id_column`), which failed to decode with `error`.
    pub fn of(row: &Row, id_column: usize, error: &Error) -> Result<Self> {
        let id: JobId = row.try_get(id_column).map_err(Error::database)?;
        Ok(Poisoned {
            id,
            reason: format!(
                "the job's row could not be read, so what did not read was replaced and, \
                 unless the job had finished, it was failed: {error}"
            ),
        })
    }
}

/// What a repair did: the jobs it moved, and those it skipped because another
/// transaction holds their rows.
#[derive(Debug, Default)]
pub(crate) struct Repair {
    pub moved: Vec<JobId>,
    pub held: Vec<JobId>,
}

/// Of the jobs asked about, those whose rows were found, and by column those whose JSON
/// serde_json does not read.
#[derive(Debug, Default)]
struct UnreadableJson {
    found: Vec<JobId>,
    args: Vec<JobId>,
    meta: Vec<JobId>,
    errors: Vec<JobId>,
}

/// Jobs a claim could not read, waiting to be moved once the claim has committed.
#[derive(Debug, Default)]
pub(crate) struct Quarantine {
    held: Mutex<Vec<Poisoned>>,
}

impl Quarantine {
    /// Holds `job` until the next [`PgBackend::quarantine_held`].
    pub fn hold(&self, job: Poisoned) {
        tracing::error!(job = %job.id, reason = %job.reason, "a claimed job's row cannot be read; failing it");
        self.lock().push(job);
    }

    fn take(&self) -> Vec<Poisoned> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Poisoned>> {
        // A panic while the list was held left it whole (push and take cannot tear it).
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl PgBackend {
    /// Moves `jobs` to `failed` with their reasons (`job_quarantine.sql`), but for rows
    /// another transaction holds, which are skipped; says which were moved and which are
    /// held (a job whose row is gone is neither).
    pub(crate) async fn quarantine(&self, jobs: &[Poisoned]) -> Result<Repair> {
        if jobs.is_empty() {
            return Ok(Repair::default());
        }
        let ids: Vec<JobId> = jobs.iter().map(|j| j.id).collect();
        let reasons: Vec<&str> = jobs.iter().map(|j| j.reason.as_str()).collect();
        let unreadable = self.unreadable_json(&ids).await?;
        let now = self.inner.clock.now();
        let client = self.client().await?;
        let rows = self
            .text(&self.inner.queries.job_quarantine)
            .query(
                &**client,
                &[
                    &ids,
                    &reasons,
                    &now,
                    &unreadable.errors,
                    &unreadable.args,
                    &unreadable.meta,
                ],
            )
            .await
            .map_err(map_pg)?;
        let moved = rows
            .iter()
            .map(|row| row.try_get(0).map_err(Error::database))
            .collect::<Result<Vec<JobId>>>()?;
        for job in jobs.iter().filter(|j| moved.contains(&j.id)) {
            tracing::error!(job = %job.id, reason = %job.reason, "moved an unreadable job to failed");
        }
        let held = unreadable
            .found
            .into_iter()
            .filter(|id| !moved.contains(id))
            .collect();
        Ok(Repair { moved, held })
    }

    /// Of the jobs `ids`, those whose error history, arguments or metadata serde_json does
    /// not read (`job_json_texts.sql`: jsonb holds what serde does not, such as an `at` that
    /// is no instant, a number beyond a double's range, nesting past 128 levels): the
    /// quarantine replaces those columns, so that the row reads from then on rather than
    /// being moved again at every read.
    async fn unreadable_json(&self, ids: &[JobId]) -> Result<UnreadableJson> {
        let client = self.client().await?;
        let rows = self
            .text(&self.inner.queries.job_json_texts)
            .query(&**client, &[&ids])
            .await
            .map_err(map_pg)?;
        let mut found = UnreadableJson::default();
        for row in &rows {
            let id: JobId = row.try_get(0).map_err(Error::database)?;
            found.found.push(id);
            let text = |column| row.try_get::<_, Option<&str>>(column).ok().flatten();
            if text(1).is_none_or(|t| serde_json::from_str::<serde_json::Value>(t).is_err()) {
                found.args.push(id);
            }
            if text(2).is_none_or(|t| serde_json::from_str::<serde_json::Value>(t).is_err()) {
                found.meta.push(id);
            }
            if text(3).is_none_or(|t| serde_json::from_str::<Vec<AttemptError>>(t).is_err()) {
                found.errors.push(id);
            }
        }
        Ok(found)
    }

    /// Moves the jobs claims held ([`Quarantine::hold`]). Those whose rows another
    /// transaction holds, and all of them on a failure, stay held for the next claim (a
    /// row deleted meanwhile does not: it would cost every claim two statements for ever);
    /// a failure is logged, not returned: the claim itself succeeded.
    pub(crate) async fn quarantine_held(&self) {
        let mut held = self.inner.quarantine.take();
        if held.is_empty() {
            return;
        }
        match self.quarantine(&held).await {
            // A row deleted meanwhile is dropped: only held rows wait for the next claim.
            Ok(repair) => held.retain(|job| repair.held.contains(&job.id)),
            Err(e) => {
                tracing::error!(error = %e.with_causes(), jobs = held.len(), "failing unreadable jobs failed; trying again at the next claim");
            }
        }
        if !held.is_empty() {
            tracing::debug!(jobs = held.len(), "unreadable jobs left for the next claim");
            self.inner.quarantine.lock().extend(held);
        }
    }

    /// Moves the scheduled jobs whose `run_at` lies outside the range of
    /// `hopper_core::limits` (the promoter could not read its next due time: `cause`).
    pub(crate) async fn quarantine_unreadable_scheduled(&self, cause: &Error) -> Result<u64> {
        let client = self.client().await?;
        let rows = self
            .text(&self.inner.queries.job_unreadable_scheduled)
            .query(&**client, &[])
            .await
            .map_err(map_pg)?;
        drop(client);
        let jobs = rows
            .iter()
            .map(|row| {
                let run_at: String = row.try_get(1).map_err(Error::database)?;
                Ok(Poisoned {
                    id: row.try_get(0).map_err(Error::database)?,
                    reason: format!(
                        "the job's run_at {run_at} could not be read ({cause}), so it was failed"
                    ),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(self.quarantine(&jobs).await?.moved.len() as u64)
    }

    /// Reads job records; a row that cannot be read is moved to `failed` and read again.
    /// A row that still cannot be read is left out, with an error logged, and so is one
    /// that another transaction holds (so it was not moved), unless `one` job was asked
    /// for: that read then fails, as a transient error.
    pub(crate) async fn job_records(&self, rows: &[Row], one: bool) -> Result<Vec<JobRecord>> {
        let mut jobs = Vec::with_capacity(rows.len());
        for row in rows {
            match rows::job_record(row) {
                Ok(job) => jobs.push(job),
                Err(e) => {
                    let poisoned = Poisoned::of(row, 0, &e)?;
                    if !self
                        .quarantine(std::slice::from_ref(&poisoned))
                        .await?
                        .held
                        .is_empty()
                    {
                        if one {
                            return Err(Error::database(LockNotGranted(format!(
                                "job {}'s row cannot be read ({e}), and another transaction \
                                 holds it, so it could not be mended; it may read once that \
                                 is free",
                                poisoned.id
                            ))));
                        }
                        tracing::warn!(job = %poisoned.id, error = %e.with_causes(), "a job's row cannot be read, and another transaction holds it; left out until it is free");
                        continue;
                    }
                    match self.job_get_once(poisoned.id).await {
                        Ok(Some(job)) => jobs.push(job),
                        Ok(None) => {}
                        Err(e) => {
                            tracing::error!(job = %poisoned.id, error = %e.with_causes(), "a failed job's row still cannot be read; left out");
                        }
                    }
                }
            }
        }
        Ok(jobs)
    }

    /// Reads one job, without moving it if it cannot be read.
    async fn job_get_once(&self, id: JobId) -> Result<Option<JobRecord>> {
        let row = self.job_row(id).await?;
        row.as_ref().map(rows::job_record).transpose()
    }

    /// The row of one job (`job_get.sql`), not yet decoded.
    pub(crate) async fn job_row(&self, id: JobId) -> Result<Option<Row>> {
        let client = self.client().await?;
        let statement = self.prepare(&client, &self.inner.queries.job_get).await?;
        statement.query_opt(&**client, &[&id]).await.map_err(map_pg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::TestDatabase;
    use hopper_core::{Backend, NewJob};

    fn poisoned(id: JobId) -> Poisoned {
        Poisoned {
            id,
            reason: "the test's reason".to_owned(),
        }
    }

    /// The jobs a claim holds for repair: one whose row another transaction holds waits
    /// for the next claim and is moved once free; one whose row is gone is dropped, not
    /// tried again at every claim.
    #[tokio::test]
    async fn a_claim_keeps_for_later_only_the_rows_held_elsewhere() -> Result<()> {
        let db = TestDatabase::new().await?;
        let pg = db.pg();
        let job = NewJob::new("k", serde_json::json!({}));
        pg.job_insert(&job).await?;
        let hold = db.hold_job(job.id).await?;
        pg.inner.quarantine.hold(poisoned(job.id));
        pg.inner.quarantine.hold(poisoned(uuid::Uuid::now_v7()));

        pg.quarantine_held().await;
        let waiting: Vec<JobId> = pg.inner.quarantine.take().iter().map(|j| j.id).collect();
        assert_eq!(
            waiting,
            [job.id],
            "the held row waits, the gone one is dropped"
        );

        pg.inner.quarantine.hold(poisoned(job.id));
        hold.release().await?;
        pg.quarantine_held().await;
        assert!(pg.inner.quarantine.take().is_empty(), "moved once free");
        let row = pg.job_row(job.id).await?.expect("the job");
        let state: String = row.try_get(4).map_err(Error::database)?;
        assert_eq!(state, "failed");
        Ok(())
    }
}
