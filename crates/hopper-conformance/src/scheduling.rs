//! Scheduling: jobs due later wait in `scheduled` until the clock passes their `run_at`.

use std::time::Duration;

use hopper_core::backend::JobPromoteOutcome;
use hopper_core::{JobState, NewJob};

use crate::{Harness, job, secs};

/// The outcome of a promotion.
fn promoted(promoted: u64, next_due: Option<chrono::DateTime<chrono::Utc>>) -> JobPromoteOutcome {
    JobPromoteOutcome { promoted, next_due }
}

/// Future job is scheduled until the clock passes it.
pub async fn future_job_is_scheduled_until_the_clock_passes_it(h: &Harness) -> anyhow::Result<()> {
    let due = h.now() + secs(3600);
    let id = h.insert(job("later", "default").with_run_at(due)).await?;
    let got = h.get(id).await?;
    assert_eq!(got.state, JobState::Scheduled);
    assert_eq!(got.run_at, due);
    assert!(h.claim("default", 10).await?.is_empty());

    assert_eq!(h.promote_outcome().await?, promoted(0, Some(due)));
    h.advance(Duration::from_secs(3599));
    assert_eq!(h.promote_outcome().await?, promoted(0, Some(due)));
    assert!(h.claim("default", 10).await?.is_empty());
    assert_eq!(h.get(id).await?.state, JobState::Scheduled);

    h.advance(Duration::from_secs(1));
    assert_eq!(h.promote_outcome().await?, promoted(1, None));
    assert_eq!(h.get(id).await?.state, JobState::Available);
    let claimed = h.claim_one("default").await?;
    assert_eq!(claimed.lease.job_id, id);
    assert_eq!(claimed.run_at, due);
    Ok(())
}

/// Past run at is available at once.
pub async fn past_run_at_is_available_at_once(h: &Harness) -> anyhow::Result<()> {
    let past = h
        .insert(job("now", "default").with_run_at(h.now() - secs(1)))
        .await?;
    let exactly_now = h.insert(job("now", "default").with_run_at(h.now())).await?;
    assert_eq!(h.get(past).await?.state, JobState::Available);
    assert_eq!(h.get(exactly_now).await?.state, JobState::Available);
    assert_eq!(h.claim("default", 10).await?.len(), 2);
    Ok(())
}

/// Insert many schedules future jobs.
pub async fn insert_many_schedules_future_jobs(h: &Harness) -> anyhow::Result<()> {
    let jobs = vec![
        job("mix", "default"),
        job("mix", "default").with_run_at(h.now() + secs(60)),
        job("mix", "default").with_run_at(h.now() - secs(60)),
        job("mix", "default").with_run_at(h.now() + secs(120)),
    ];
    h.backend.job_insert_many(&jobs).await?;
    let states = [
        JobState::Available,
        JobState::Scheduled,
        JobState::Available,
        JobState::Scheduled,
    ];
    for (job, state) in jobs.iter().zip(states) {
        assert_eq!(h.get(job.id).await?.state, state);
    }
    assert_eq!(h.claim("default", 10).await?.len(), 2);
    h.advance(Duration::from_secs(60));
    assert_eq!(
        h.promote_outcome().await?,
        promoted(1, Some(h.now() + secs(60)))
    );
    assert_eq!(h.claim_one("default").await?.lease.job_id, jobs[1].id);
    Ok(())
}

/// Promote handles more than one batch.
pub async fn promote_handles_more_than_one_batch(h: &Harness) -> anyhow::Result<()> {
    const N: usize = 2_500;
    let at = h.now() + secs(10);
    let jobs: Vec<NewJob> = (0..N)
        .map(|_| job("many", "default").with_run_at(at))
        .collect();
    h.backend.job_insert_many(&jobs).await?;
    h.advance(Duration::from_secs(10));
    assert_eq!(h.promote().await?, N as u64);
    let stats = h.backend.queue_stats().await?;
    assert_eq!((stats[0].available, stats[0].scheduled), (N as i64, 0));
    Ok(())
}
