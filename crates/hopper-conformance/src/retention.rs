//! Retention ([`hopper_core::backend::MaintenanceStore::job_prune`]): finished jobs are
//! deleted once their state's retention ran out, by the backend's clock, in batches;
//! nothing else is touched.

use std::time::Duration;

use anyhow::ensure;
use hopper_core::JobState;
use hopper_core::backend::{
    JobCancelParams, JobGetParams, JobPruneOutcome, JobPruneParams, Outcome,
};

use crate::{Harness, completed, job};

const DAY: Duration = Duration::from_secs(24 * 3600);

fn params(limit: u32, dry_run: bool) -> JobPruneParams {
    JobPruneParams {
        completed_retention: DAY,
        failed_retention: DAY * 7,
        limit,
        dry_run,
        after: None,
    }
}

/// One prune call.
async fn prune(h: &Harness, params: &JobPruneParams) -> anyhow::Result<JobPruneOutcome> {
    Ok(h.maintenance().job_prune(params).await?)
}

/// Prune deletes finished jobs past their state retention.
pub async fn prune_deletes_finished_jobs_past_their_state_retention(
    h: &Harness,
) -> anyhow::Result<()> {
    let done = h.insert(job("done", "default")).await?;
    let lease = h.claim_one("default").await?.lease;
    h.finish(lease, completed()).await?;
    let dead = h.insert(job("dead", "default")).await?;
    let lease = h.claim_one("default").await?.lease;
    let failed = Outcome::Failed {
        error: "no".into(),
        duration_ms: 1,
    };
    h.finish(lease, failed).await?;
    let cancelled = h.insert(job("cancelled", "default")).await?;
    h.backend
        .job_cancel(&JobCancelParams { id: cancelled })
        .await?;
    let running = h.insert(job("running", "default")).await?;
    let lease = h.claim_one("default").await?.lease;
    ensure!(lease.job_id == running);
    let waiting = h.insert(job("waiting", "default")).await?;

    // Within every retention: nothing goes.
    h.advance(DAY - Duration::from_secs(1));
    let outcome = prune(h, &params(1000, false)).await?;
    assert_eq!(
        outcome,
        JobPruneOutcome {
            elected: true,
            ..JobPruneOutcome::default()
        }
    );

    // Past a day: completed and cancelled jobs go; failed, running and waiting ones stay.
    h.advance(Duration::from_secs(2));
    let dry = prune(h, &params(1000, true)).await?;
    let expected = JobPruneOutcome {
        elected: true,
        completed: 1,
        cancelled: 1,
        failed: 0,
        last_id: None,
    };
    assert_eq!(dry, expected, "a dry run counts what would go");
    ensure!(
        h.backend
            .job_get(&JobGetParams { id: done })
            .await?
            .is_some(),
        "a dry run deletes nothing"
    );
    let outcome = prune(h, &params(1000, false)).await?;
    let last_id = Some(done.max(cancelled));
    assert_eq!(
        outcome,
        JobPruneOutcome {
            last_id,
            ..expected
        }
    );
    for gone in [done, cancelled] {
        ensure!(
            h.backend
                .job_get(&JobGetParams { id: gone })
                .await?
                .is_none(),
            "{gone} was pruned"
        );
    }
    assert_eq!(h.get(dead).await?.state, JobState::Failed);
    assert_eq!(h.get(running).await?.state, JobState::Running);
    assert_eq!(h.get(waiting).await?.state, JobState::Available);

    // Past a week: the failed job goes too; the others still stay.
    h.advance(DAY * 6);
    let outcome = prune(h, &params(1000, false)).await?;
    assert_eq!(outcome.failed, 1);
    assert_eq!(outcome.total(), 1);
    ensure!(
        h.backend
            .job_get(&JobGetParams { id: dead })
            .await?
            .is_none()
    );
    assert_eq!(h.get(running).await?.state, JobState::Running);
    assert_eq!(h.get(waiting).await?.state, JobState::Available);
    Ok(())
}

/// Prune deletes at most the limit per call.
pub async fn prune_deletes_at_most_the_limit_per_call(h: &Harness) -> anyhow::Result<()> {
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(h.insert(job("k", "default")).await?);
    }
    for claimed in h.claim("default", 5).await? {
        h.finish(claimed.lease, completed()).await?;
    }
    h.advance(DAY * 2);
    let mut batches = Vec::new();
    loop {
        let outcome = prune(h, &params(2, false)).await?;
        batches.push(outcome.completed);
        if outcome.total() < 2 {
            break;
        }
    }
    assert_eq!(batches, vec![2, 2, 1], "full batches, then the rest");
    for id in ids {
        ensure!(
            h.backend.job_get(&JobGetParams { id }).await?.is_none(),
            "{id} was pruned"
        );
    }
    Ok(())
}

/// Prune takes the oldest first.
pub async fn prune_takes_the_oldest_first(h: &Harness) -> anyhow::Result<()> {
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(h.insert(job("k", "default")).await?);
    }
    for claimed in h.claim("default", 3).await? {
        h.finish(claimed.lease, completed()).await?;
    }
    h.advance(DAY * 2);
    let outcome = prune(h, &params(2, false)).await?;
    assert_eq!(outcome.completed, 2);
    ensure!(
        h.backend
            .job_get(&JobGetParams { id: ids[0] })
            .await?
            .is_none()
    );
    ensure!(
        h.backend
            .job_get(&JobGetParams { id: ids[1] })
            .await?
            .is_none()
    );
    ensure!(
        h.backend
            .job_get(&JobGetParams { id: ids[2] })
            .await?
            .is_some(),
        "the newest is kept"
    );
    Ok(())
}

/// A batch reads on past the previous batch's last job (`after`): a job below it is left
/// for the next pass, even one whose retention has run out since, and `last_id` names the
/// greatest job a batch deleted.
pub async fn prune_reads_on_past_the_previous_batch(h: &Harness) -> anyhow::Result<()> {
    let running = h.insert(job("k", "default")).await?;
    let lease = h.claim_one("default").await?.lease;
    ensure!(lease.job_id == running);
    let mut done = Vec::new();
    for _ in 0..3 {
        done.push(h.insert(job("k", "default")).await?);
    }
    for claimed in h.claim("default", 3).await? {
        h.finish(claimed.lease, completed()).await?;
    }
    h.advance(DAY * 2);
    let first = prune(h, &params(2, false)).await?;
    assert_eq!(first.completed, 2, "{first:?}");
    assert_eq!(first.last_id, Some(done[1]), "the greatest id deleted");

    // The running job, kept by the first batch, finishes and its retention runs out.
    h.finish(lease, completed()).await?;
    h.advance(DAY * 2);
    let next = JobPruneParams {
        after: first.last_id,
        ..params(2, false)
    };
    let dry = prune(
        h,
        &JobPruneParams {
            dry_run: true,
            ..next.clone()
        },
    )
    .await?;
    assert_eq!(
        dry.completed, 2,
        "a dry run counts every job, whatever `after`"
    );
    let second = prune(h, &next).await?;
    assert_eq!(second.completed, 1, "only the job past `after`: {second:?}");
    assert_eq!(second.last_id, Some(done[2]));
    assert_eq!(h.get(running).await?.state, JobState::Completed, "left");

    // A new pass starts at the oldest job again.
    let pass = prune(h, &params(2, false)).await?;
    assert_eq!(pass.completed, 1, "{pass:?}");
    assert_eq!(pass.last_id, Some(running));
    let empty = prune(h, &params(2, false)).await?;
    assert_eq!(empty.last_id, None, "nothing deleted");
    Ok(())
}
