//! Retention: deleting finished jobs once their state's retention ran out
//! (`job_prune.sql`, whose comment explains the index and the election).

use hopper_core::{Error, JobPruneOutcome, JobPruneParams, Result};

use crate::PgBackend;
use crate::error::map_pg;
use crate::hot::millis;

impl PgBackend {
    pub(crate) async fn jobs_prune(&self, params: &JobPruneParams) -> Result<JobPruneOutcome> {
        let client = self.client().await?;
        let now = self.inner.clock.now();
        let (done, failed) = (
            millis(params.completed_retention),
            millis(params.failed_retention),
        );
        let row = if params.dry_run {
            self.text(&self.inner.queries.job_prune_count)
                .query_one(&**client, &[&done, &failed, &now])
                .await
        } else {
            let limit = i64::from(params.limit.max(1));
            self.text(&self.inner.queries.job_prune)
                .query_one(&**client, &[&done, &failed, &limit, &now, &params.after])
                .await
        }
        .map_err(map_pg)?;
        let count = |i: usize| -> Result<u64> {
            let n: i64 = row.try_get(i).map_err(Error::database)?;
            Ok(u64::try_from(n).unwrap_or(0))
        };
        Ok(JobPruneOutcome {
            elected: row.try_get(0).map_err(Error::database)?,
            completed: count(1)?,
            cancelled: count(2)?,
            failed: count(3)?,
            last_id: if params.dry_run {
                None
            } else {
                row.try_get(4).map_err(Error::database)?
            },
        })
    }
}
