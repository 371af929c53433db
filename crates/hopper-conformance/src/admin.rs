//! Administration: manual retry, cancel, clear, and their refusals.

use std::time::Duration;

use hopper_core::backend::{
    FinishResult, JobCancelParams, JobClearParams, JobGetParams, JobRetryParams, Outcome,
};
use hopper_core::{Error, JobState};
use uuid::Uuid;

use crate::{Harness, completed, job, retry, secs};

/// Retry of failed job gives fresh attempts.
pub async fn retry_of_failed_job_gives_fresh_attempts(h: &Harness) -> anyhow::Result<()> {
    let id = h
        .insert(job("again", "default").with_max_attempts(2))
        .await?;
    for _ in 0..2 {
        let claimed = h.claim_one("default").await?;
        h.finish(claimed.lease, retry("nope", Duration::ZERO))
            .await?;
    }
    assert_eq!(h.get(id).await?.state, JobState::Failed);
    assert!(h.claim("default", 1).await?.is_empty());

    h.advance(Duration::from_secs(5));
    let record = h.backend.job_retry(&JobRetryParams { id }).await?;
    assert_eq!(record.state, JobState::Available);
    assert_eq!(record.run_at, h.now());
    assert_eq!(record.finished_at, None);
    assert_eq!(record.errors.len(), 2, "the history is kept");

    let claimed = h.claim_one("default").await?;
    assert_eq!(claimed.counted_attempt, 1, "a fresh set of attempts");
    assert_eq!(claimed.lease.attempt, 3);
    let result = h
        .finish(claimed.lease, retry("still", Duration::from_secs(1)))
        .await?;
    assert_eq!(
        result,
        FinishResult::Recorded(JobState::Scheduled),
        "one attempt of the fresh two is left"
    );
    h.advance(Duration::from_secs(1));
    h.promote().await?;
    let claimed = h.claim_one("default").await?;
    assert_eq!(claimed.counted_attempt, 2);
    let result = h
        .finish(claimed.lease, retry("still", Duration::from_secs(1)))
        .await?;
    assert_eq!(result, FinishResult::Recorded(JobState::Failed));
    assert_eq!(h.get(id).await?.errors.len(), 4);
    Ok(())
}

/// Retry of cancelled job makes it available.
pub async fn retry_of_cancelled_job_makes_it_available(h: &Harness) -> anyhow::Result<()> {
    let id = h
        .insert(job("c", "default").with_run_at(h.now() + secs(3600)))
        .await?;
    assert_eq!(
        h.backend.job_cancel(&JobCancelParams { id }).await?.state,
        JobState::Cancelled
    );
    let record = h.backend.job_retry(&JobRetryParams { id }).await?;
    assert_eq!(record.state, JobState::Available);
    assert_eq!(record.run_at, h.now(), "a manual retry runs now");
    assert_eq!(h.claim_one("default").await?.lease.job_id, id);
    Ok(())
}

/// Retry or cancel of completed job is a conflict.
pub async fn retry_or_cancel_of_completed_job_is_a_conflict(h: &Harness) -> anyhow::Result<()> {
    let id = h.insert(job("done", "default")).await?;
    let claimed = h.claim_one("default").await?;
    h.finish(claimed.lease, completed()).await?;
    let done = h.get(id).await?;
    let err = h
        .backend
        .job_retry(&JobRetryParams { id })
        .await
        .expect_err("retry refused");
    assert!(matches!(err, Error::Conflict(_)), "{err:?}");
    assert!(err.to_string().contains("completed"), "{err}");
    let err = h
        .backend
        .job_cancel(&JobCancelParams { id })
        .await
        .expect_err("cancel refused");
    assert!(matches!(err, Error::Conflict(_)), "{err:?}");
    assert_eq!(h.get(id).await?, done, "nothing changed");

    // Nor can a job that is still queued be "retried".
    let queued = h.insert(job("queued", "default")).await?;
    let err = h
        .backend
        .job_retry(&JobRetryParams { id: queued })
        .await
        .expect_err("refused");
    assert!(matches!(err, Error::Conflict(_)), "{err:?}");
    Ok(())
}

/// Retry or cancel of unknown job is not found.
pub async fn retry_or_cancel_of_unknown_job_is_not_found(h: &Harness) -> anyhow::Result<()> {
    h.insert(job("other", "default")).await?;
    let unknown = Uuid::now_v7();
    let err = h
        .backend
        .job_retry(&JobRetryParams { id: unknown })
        .await
        .expect_err("refused");
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
    assert!(err.to_string().contains(&unknown.to_string()), "{err}");
    let err = h
        .backend
        .job_cancel(&JobCancelParams { id: unknown })
        .await
        .expect_err("refused");
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
    Ok(())
}

/// Cancel of queued jobs is immediate.
pub async fn cancel_of_queued_jobs_is_immediate(h: &Harness) -> anyhow::Result<()> {
    let available = h.insert(job("c", "default")).await?;
    let scheduled = h
        .insert(job("c", "default").with_run_at(h.now() + secs(5)))
        .await?;
    for id in [available, scheduled] {
        let record = h.backend.job_cancel(&JobCancelParams { id }).await?;
        assert_eq!(record.state, JobState::Cancelled);
        assert_eq!(record.finished_at, Some(h.now()));
    }
    h.advance(Duration::from_secs(5));
    assert_eq!(h.promote().await?, 0);
    assert!(h.claim("default", 10).await?.is_empty());
    let err = h
        .backend
        .job_cancel(&JobCancelParams { id: available })
        .await
        .expect_err("twice");
    assert!(matches!(err, Error::Conflict(_)), "{err:?}");
    Ok(())
}

/// Clear deletes all but running jobs.
pub async fn clear_deletes_all_but_running_jobs(h: &Harness) -> anyhow::Result<()> {
    let running = h.insert(job("c", "a")).await?;
    h.claim_one("a").await?;
    let done = h.insert(job("c", "a")).await?;
    let claimed = h.claim_one("a").await?;
    h.finish(
        claimed.lease,
        Outcome::Failed {
            error: "x".into(),
            duration_ms: 0,
        },
    )
    .await?;
    h.insert(job("c", "a")).await?;
    h.insert(job("c", "a").with_run_at(h.now() + secs(5)))
        .await?;
    let other = h.insert(job("c", "b")).await?;
    assert_eq!(
        h.backend
            .job_clear(&JobClearParams {
                queue: Some("a".into())
            })
            .await?,
        3
    );
    assert_eq!(h.get(running).await?.state, JobState::Running);
    assert_eq!(h.backend.job_get(&JobGetParams { id: done }).await?, None);
    assert_eq!(h.get(other).await?.state, JobState::Available);
    assert_eq!(h.backend.job_clear(&JobClearParams::default()).await?, 1);
    assert_eq!(h.backend.job_get(&JobGetParams { id: other }).await?, None);
    assert_eq!(h.get(running).await?.state, JobState::Running);
    Ok(())
}
