//! The hot path's claims: claiming jobs of a plain queue on a pooled client (outcomes are
//! written by `outcomes.rs`).
//!
//! Writing the waiting outcomes in the next claim's transaction (one commit for both) was
//! measured and lost: see job_claim.sql.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use deadpool_postgres::Object;
use hopper_core::{ClaimParams, ClaimedJob, Error, JobId, Result};

use crate::PgBackend;
use crate::cursor::Start;
use crate::error::map_pg;
use crate::poison::Poisoned;
use crate::scheduling::{claimed_job, in_claim_order};
use crate::statement::driver;

/// The column of job_claim.sql's rows that says when the row was written (the next one:
/// when the statement started).
const CLAIM_WRITTEN_AT: usize = 12;

/// Milliseconds as the SQL files take them.
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
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
        self.claimed_jobs(&rows)
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
        Ok((self.claimed_jobs(&rows)?, took))
    }

    /// The jobs of `job_claim.sql`'s rows, in claim order; rows that do not read are held
    /// for the quarantine (moved to `failed` once the claim returned), not handed out, and
    /// stop none of the others.
    fn claimed_jobs(&self, rows: &[tokio_postgres::Row]) -> Result<Vec<ClaimedJob>> {
        let mut jobs: Vec<ClaimedJob> = Vec::with_capacity(rows.len());
        for row in rows {
            match claimed_job(row, 0) {
                Ok(job) => jobs.push(job),
                Err(e) => self.inner.quarantine.hold(Poisoned::of(row, 0, &e)?),
            }
        }
        in_claim_order(&mut jobs);
        Ok(jobs)
    }
}
