//! Periodic jobs: registering entries, listing them, and enqueuing a tick exactly once.
//!
//! The schedule arithmetic is the runtime's (`hopper::PeriodicJob`); here a tick is
//! enqueued by a compare-and-set on `next_run_at` (`cron_advance.sql`) and the tick's job
//! is inserted in the same transaction with the unique key `cron:<name>:<tick>` and the
//! tick as its unique window (so the key stays taken after the job finished), so even two nodes that both read the old `next_run_at` enqueue it
//! once: the second one's update finds the row changed and writes nothing.

use hopper_core::policy;
use hopper_core::{CronAdvance, CronEntry, Error, InsertOutcome, JobId, Priority, Result};

use crate::PgBackend;
use crate::error::map_pg;

impl PgBackend {
    pub(crate) async fn cron_entries_register(&self, entries: &[CronEntry]) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(map_pg)?;
        let now = self.inner.clock.now();
        for e in entries {
            hopper_core::job::validate_name("periodic job", &e.name)?;
            hopper_core::job::validate_name("queue", &e.queue)?;
            hopper_core::job::validate_name("kind", &e.kind)?;
            self.text(&self.inner.queries.cron_register)
                .execute(
                    &*tx,
                    &[
                        &e.name,
                        &e.schedule,
                        &e.timezone,
                        &e.queue,
                        &e.kind,
                        &e.args,
                        &e.priority.0,
                        &e.max_attempts,
                        &e.timeout_ms,
                        &e.catch_up,
                        &e.next_run_at,
                        &now,
                    ],
                )
                .await
                .map_err(map_pg)?;
        }
        tx.commit().await.map_err(map_pg)
    }

    pub(crate) async fn cron_entries_list(&self) -> Result<Vec<CronEntry>> {
        let client = self.client().await?;
        let rows = self
            .text(&self.inner.queries.cron_list)
            .query(&**client, &[])
            .await
            .map_err(map_pg)?;
        Ok(rows
            .iter()
            .filter_map(|r| crate::rows::listed("periodic job", cron_entry(r)))
            .collect())
    }

    pub(crate) async fn cron_entry_advance(&self, advance: &CronAdvance) -> Result<bool> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(map_pg)?;
        let jobs = policy::cron_tick_jobs(advance);
        let last = advance.jobs.last().map(|(tick, _)| *tick);
        let last_id: Option<JobId> = jobs.last().map(|j| j.id);
        let moved = self
            .text(&self.inner.queries.cron_advance)
            .query_opt(
                &*tx,
                &[
                    &advance.name,
                    &advance.expected_next_run_at,
                    &advance.next_run_at,
                    &last,
                    &last_id,
                ],
            )
            .await
            .map_err(map_pg)?;
        if moved.is_none() {
            return Ok(false);
        }
        if !jobs.is_empty() {
            let outcomes = self.upsert_many_in(&tx, &jobs).await?;
            if outcomes.iter().all(|o| *o != InsertOutcome::Inserted) {
                tracing::debug!(name = %advance.name, "periodic ticks were already enqueued");
            }
        }
        tx.commit().await.map_err(map_pg)?;
        Ok(true)
    }
}

/// A row of `cron_list.sql`.
fn cron_entry(r: &tokio_postgres::Row) -> Result<CronEntry> {
    Ok(CronEntry {
        name: r.try_get(0).map_err(Error::database)?,
        schedule: r.try_get(1).map_err(Error::database)?,
        timezone: r.try_get(2).map_err(Error::database)?,
        queue: r.try_get(3).map_err(Error::database)?,
        kind: r.try_get(4).map_err(Error::database)?,
        args: r.try_get(5).map_err(Error::database)?,
        priority: Priority(r.try_get(6).map_err(Error::database)?),
        max_attempts: r.try_get(7).map_err(Error::database)?,
        timeout_ms: r.try_get(8).map_err(Error::database)?,
        catch_up: r.try_get(9).map_err(Error::database)?,
        next_run_at: r.try_get(10).map_err(Error::database)?,
        last_run_at: r.try_get(11).map_err(Error::database)?,
        last_job_id: r.try_get(12).map_err(Error::database)?,
    })
}
