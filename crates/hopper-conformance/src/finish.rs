//! Outcomes: complete, retry with backoff, dead letter, permanent failure, snooze, release.

use std::time::Duration;

use hopper_core::backend::{Finish, FinishResult, Outcome};
use hopper_core::limits::{MAX_ERROR_BYTES, MAX_ERROR_HISTORY};
use hopper_core::{JobState, Lease};

use crate::{Harness, completed, job, retry, secs};

/// Complete with the current lease is recorded.
pub async fn complete_with_the_current_lease_is_recorded(h: &Harness) -> anyhow::Result<()> {
    let id = h.insert(job("done", "default")).await?;
    let claimed = h.claim_one("default").await?;
    h.advance(Duration::from_secs(3));
    let result = h
        .finish(claimed.lease, Outcome::Completed { duration_ms: 2999 })
        .await?;
    assert_eq!(result, FinishResult::Recorded(JobState::Completed));
    let got = h.get(id).await?;
    assert_eq!(got.state, JobState::Completed);
    assert_eq!(got.duration_ms, Some(2999));
    assert_eq!(got.finished_at, Some(h.now()));
    assert_eq!(got.lease_expires_at, None);
    assert!(got.errors.is_empty());
    assert!(h.claim("default", 10).await?.is_empty());
    Ok(())
}

/// Retry schedules after the delay and records the error.
pub async fn retry_schedules_after_the_delay_and_records_the_error(
    h: &Harness,
) -> anyhow::Result<()> {
    let id = h
        .insert(job("flaky", "default").with_max_attempts(3))
        .await?;
    let claimed = h.claim_one("default").await?;
    h.advance(Duration::from_secs(2));
    let result = h
        .finish(
            claimed.lease,
            Outcome::Retry {
                error: "connection refused".into(),
                retry_in: Duration::from_secs(60),
                duration_ms: 1234,
            },
        )
        .await?;
    assert_eq!(result, FinishResult::Recorded(JobState::Scheduled));
    let got = h.get(id).await?;
    assert_eq!(got.state, JobState::Scheduled);
    assert_eq!(got.run_at, h.now() + secs(60));
    assert_eq!(got.finished_at, None);
    assert_eq!(got.lease_expires_at, None);
    assert_eq!(got.errors.len(), 1);
    let e = &got.errors[0];
    assert_eq!(e.attempt, 1);
    assert_eq!(e.error, "connection refused");
    assert_eq!(e.duration_ms, Some(1234));
    assert_eq!(e.at, h.now());
    assert_eq!(e.node, Some(h.node.id));

    // Not before the delay…
    h.advance(Duration::from_secs(59));
    assert_eq!(h.promote().await?, 0);
    assert!(h.claim("default", 1).await?.is_empty());
    // …then again, as the second counted attempt.
    h.advance(Duration::from_secs(1));
    assert_eq!(h.promote().await?, 1);
    let again = h.claim_one("default").await?;
    assert_eq!(again.lease.attempt, 2);
    assert_eq!(again.counted_attempt, 2);
    Ok(())
}

/// Last attempt dead letters keeping every error.
pub async fn last_attempt_dead_letters_keeping_every_error(h: &Harness) -> anyhow::Result<()> {
    let id = h
        .insert(job("doomed", "default").with_max_attempts(3))
        .await?;
    for attempt in 1..=3 {
        let claimed = h.claim_one("default").await?;
        assert_eq!(claimed.counted_attempt, attempt);
        let result = h
            .finish(
                claimed.lease,
                retry(&format!("failure {attempt}"), Duration::from_secs(10)),
            )
            .await?;
        let expected = if attempt < 3 {
            JobState::Scheduled
        } else {
            JobState::Failed
        };
        assert_eq!(result, FinishResult::Recorded(expected));
        h.advance(Duration::from_secs(10));
        h.promote().await?;
    }
    let got = h.get(id).await?;
    assert_eq!(got.state, JobState::Failed);
    assert_eq!(got.finished_at, Some(h.now() - secs(10)));
    let history: Vec<(i32, &str)> = got
        .errors
        .iter()
        .map(|e| (e.attempt, e.error.as_str()))
        .collect();
    assert_eq!(
        history,
        vec![(1, "failure 1"), (2, "failure 2"), (3, "failure 3")]
    );
    assert!(
        h.claim("default", 1).await?.is_empty(),
        "dead letters stay put"
    );
    Ok(())
}

/// Failed outcome dead letters at once.
pub async fn failed_outcome_dead_letters_at_once(h: &Harness) -> anyhow::Result<()> {
    let id = h.insert(job("bad", "default")).await?;
    let claimed = h.claim_one("default").await?;
    let result = h
        .finish(
            claimed.lease,
            Outcome::Failed {
                error: "invalid recipient".into(),
                duration_ms: 3,
            },
        )
        .await?;
    assert_eq!(result, FinishResult::Recorded(JobState::Failed));
    let got = h.get(id).await?;
    assert_eq!(got.state, JobState::Failed);
    assert_eq!(got.max_attempts, 25, "attempts were left, yet it failed");
    assert_eq!(got.finished_at, Some(h.now()));
    assert_eq!(got.errors.len(), 1);
    assert_eq!(got.errors[0].error, "invalid recipient");
    assert_eq!(got.errors[0].duration_ms, Some(3));
    Ok(())
}

/// Snooze does not use an attempt.
pub async fn snooze_does_not_use_an_attempt(h: &Harness) -> anyhow::Result<()> {
    let id = h
        .insert(job("later", "default").with_max_attempts(1))
        .await?;
    let claimed = h.claim_one("default").await?;
    let result = h
        .finish(
            claimed.lease,
            Outcome::Snoozed {
                retry_in: Duration::from_secs(30),
            },
        )
        .await?;
    assert_eq!(result, FinishResult::Recorded(JobState::Scheduled));
    let got = h.get(id).await?;
    assert_eq!(got.state, JobState::Scheduled);
    assert_eq!(got.run_at, h.now() + secs(30));
    assert_eq!(got.uncounted, 1);
    assert!(got.errors.is_empty(), "a snooze is not an error");

    h.advance(Duration::from_secs(30));
    assert_eq!(h.promote().await?, 1);
    let again = h.claim_one("default").await?;
    assert_eq!(again.lease.attempt, 2, "a new lease");
    assert_eq!(again.counted_attempt, 1, "still the first counted attempt");
    // That was the only counted attempt: failing it now dead-letters the job.
    let result = h
        .finish(again.lease, retry("real failure", Duration::from_secs(1)))
        .await?;
    assert_eq!(result, FinishResult::Recorded(JobState::Failed));
    Ok(())
}

/// Release makes the job available at once uncounted.
pub async fn release_makes_the_job_available_at_once_uncounted(h: &Harness) -> anyhow::Result<()> {
    let id = h
        .insert(job("handback", "default").with_max_attempts(1))
        .await?;
    let claimed = h.claim_one("default").await?;
    let result = h.finish(claimed.lease, Outcome::Released).await?;
    assert_eq!(result, FinishResult::Recorded(JobState::Available));
    let got = h.get(id).await?;
    assert_eq!(got.state, JobState::Available);
    assert_eq!(got.run_at, h.now());
    assert_eq!((got.attempt, got.uncounted), (1, 1));
    assert_eq!(got.lease_expires_at, None);
    assert!(got.errors.is_empty());
    let again = h.claim_one("default").await?;
    assert_eq!(again.counted_attempt, 1);
    let result = h.finish(again.lease, completed()).await?;
    assert_eq!(result, FinishResult::Recorded(JobState::Completed));
    Ok(())
}

/// Finish many answers each outcome in order.
pub async fn finish_many_answers_each_outcome_in_order(h: &Harness) -> anyhow::Result<()> {
    for _ in 0..5 {
        h.insert(job("batch", "default")).await?;
    }
    let mut claimed = h.claim("default", 5).await?;
    claimed.sort_by_key(|c| c.lease.job_id);
    let lease = |i: usize| claimed[i].lease;
    let stale = Lease {
        job_id: claimed[4].lease.job_id,
        attempt: 99,
    };
    let finishes = vec![
        Finish {
            lease: lease(3),
            outcome: Outcome::Snoozed {
                retry_in: Duration::from_secs(1),
            },
        },
        Finish {
            lease: lease(0),
            outcome: completed(),
        },
        Finish {
            lease: stale,
            outcome: completed(),
        },
        Finish {
            lease: lease(1),
            outcome: retry("again", Duration::from_secs(5)),
        },
        Finish {
            lease: lease(2),
            outcome: Outcome::Failed {
                error: "never".into(),
                duration_ms: 1,
            },
        },
        Finish {
            lease: lease(4),
            outcome: Outcome::Released,
        },
    ];
    let results = h.backend.job_finish_many(&finishes).await?;
    assert_eq!(
        results,
        vec![
            FinishResult::Recorded(JobState::Scheduled),
            FinishResult::Recorded(JobState::Completed),
            FinishResult::LeaseLost,
            FinishResult::Recorded(JobState::Scheduled),
            FinishResult::Recorded(JobState::Failed),
            FinishResult::Recorded(JobState::Available),
        ]
    );
    let states = [
        JobState::Completed,
        JobState::Scheduled,
        JobState::Failed,
        JobState::Scheduled,
        JobState::Available,
    ];
    for (i, state) in states.into_iter().enumerate() {
        assert_eq!(h.get(lease(i).job_id).await?.state, state, "job {i}");
    }
    assert!(h.backend.job_finish_many(&[]).await?.is_empty());
    Ok(())
}

/// A retry without delay is available at once; a permanent failure is final and kept in
/// the error history.
pub async fn zero_delay_retry_is_available_and_permanent_failure_is_final(
    h: &Harness,
) -> anyhow::Result<()> {
    let a = h.insert(job("k", "q")).await?;
    let c = h.claim_one("q").await?;
    assert_eq!(
        h.finish(c.lease, retry("again", Duration::ZERO)).await?,
        FinishResult::Recorded(JobState::Available)
    );
    let c = h.claim_one("q").await?;
    assert_eq!(
        c.lease,
        Lease {
            job_id: a,
            attempt: 2
        }
    );
    let outcome = Outcome::Failed {
        error: "bad input".into(),
        duration_ms: 3,
    };
    assert_eq!(
        h.finish(c.lease, outcome).await?,
        FinishResult::Recorded(JobState::Failed)
    );
    let got = h.get(a).await?;
    assert_eq!(got.errors.len(), 2);
    assert_eq!(got.errors[1].error, "bad input");
    Ok(())
}

/// An error history keeps its most recent [`MAX_ERROR_HISTORY`] entries, oldest first:
/// each failed attempt past that drops the oldest, and so does a lease that expires.
pub async fn an_error_history_keeps_its_most_recent_entries(h: &Harness) -> anyhow::Result<()> {
    let failures = MAX_ERROR_HISTORY + 3;
    let id = h
        .insert(job("k", "q").with_max_attempts(failures + 2))
        .await?;
    for n in 1..=failures {
        let c = h.claim_one("q").await?;
        let outcome = retry(&format!("failure {n}"), Duration::ZERO);
        h.finish(c.lease, outcome).await?;
    }
    let got = h.get(id).await?;
    let attempts: Vec<i32> = got.errors.iter().map(|e| e.attempt).collect();
    assert_eq!(attempts, (4..=failures).collect::<Vec<_>>(), "the latest");
    let last = got.errors.last().map(|e| e.error.as_str());
    assert_eq!(last, Some(format!("failure {failures}").as_str()));

    let claimed = h
        .claim_as(h.node.id, "q", 1, Duration::from_secs(10))
        .await?;
    assert_eq!(claimed.len(), 1);
    h.advance(Duration::from_secs(11));
    assert_eq!(h.maintenance().job_rescue_expired().await?, 1);
    let got = h.get(id).await?;
    let attempts: Vec<i32> = got.errors.iter().map(|e| e.attempt).collect();
    assert_eq!(
        attempts,
        (5..=failures + 1).collect::<Vec<_>>(),
        "after a rescue"
    );
    Ok(())
}

/// An attempt's error longer than [`MAX_ERROR_BYTES`] is kept cut in its middle, saying so,
/// so that one worker's endless message cannot make every listing of its job huge.
pub async fn a_long_error_is_kept_cut_to_its_bound(h: &Harness) -> anyhow::Result<()> {
    let id = h.insert(job("k", "q").with_max_attempts(3)).await?;
    let c = h.claim_one("q").await?;
    let long = format!("first line\n{}\nlast line", "x".repeat(1024 * 1024));
    h.finish(c.lease, retry(&long, Duration::ZERO)).await?;
    let got = h.get(id).await?;
    let kept = got
        .errors
        .last()
        .map(|e| e.error.clone())
        .unwrap_or_default();
    assert!(
        kept.len() <= MAX_ERROR_BYTES + 40,
        "{} bytes kept",
        kept.len()
    );
    assert!(kept.starts_with("first line\nxxx"), "its start is kept");
    assert!(kept.contains(" bytes cut] … "), "the cut is said");
    assert!(kept.ends_with("xxx\nlast line"), "its end is kept");
    Ok(())
}
