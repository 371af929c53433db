//! What the HTTP API and the dashboard need: search by creation time, delete, bulk retry of
//! failed jobs, per-minute statistics.
//!
//! Search, delete and bulk retry are required of every backend; per-minute statistics are
//! a capability ([`hopper_core::backend::StatsStore`]), checked where a backend offers it.

use std::time::Duration;

use anyhow::ensure;
use hopper_core::backend::{
    JobCancelParams, JobDeleteParams, JobGetParams, JobRetryManyParams, JobSearchParams,
    JobStatsParams, Outcome,
};
use hopper_core::{Error, JobListParams, JobState};
use uuid::Uuid;

use crate::{Harness, completed, job, secs};

/// Search filters by creation time.
pub async fn search_filters_by_creation_time(h: &Harness) -> anyhow::Result<()> {
    let a = h.insert(job("k", "default")).await?;
    h.advance(Duration::from_secs(1));
    let b = h.insert(job("k", "other")).await?;
    let (ca, cb) = (h.get(a).await?.created_at, h.get(b).await?.created_at);
    ensure!(
        ca < cb,
        "jobs inserted one after the other have increasing created_at"
    );
    let search = |after, before| JobSearchParams {
        list: JobListParams {
            limit: 10,
            ..JobListParams::default()
        },
        created_after: after,
        created_before: before,
    };
    let ids =
        |jobs: Vec<hopper_core::JobRecord>| jobs.into_iter().map(|j| j.id).collect::<Vec<_>>();

    // Without a range, a search is a listing (every backend, by the default body).
    let all = h.backend.job_search(&search(None, None)).await?;
    assert_eq!(ids(all), vec![b, a]);

    let after = h.backend.job_search(&search(Some(cb), None)).await?;
    assert_eq!(ids(after), vec![b], "created_after is inclusive");
    let before = h.backend.job_search(&search(None, Some(cb))).await?;
    assert_eq!(ids(before), vec![a], "created_before is exclusive");
    let mut both = search(Some(ca), Some(cb + secs(1)));
    both.list.queue = Some("other".to_owned());
    assert_eq!(
        ids(h.backend.job_search(&both).await?),
        vec![b],
        "with the list filters"
    );
    Ok(())
}

/// Delete removes a job unless it runs.
pub async fn delete_removes_a_job_unless_it_runs(h: &Harness) -> anyhow::Result<()> {
    let queued = h.insert(job("k", "default")).await?;
    h.backend
        .job_delete(&JobDeleteParams { id: queued })
        .await?;
    assert_eq!(h.backend.job_get(&JobGetParams { id: queued }).await?, None);

    let running = h.insert(job("k", "default")).await?;
    let claimed = h.claim_one("default").await?;
    let err = h
        .backend
        .job_delete(&JobDeleteParams { id: running })
        .await
        .expect_err("refused");
    assert!(matches!(err, Error::Conflict(_)), "{err:?}");
    assert_eq!(h.get(running).await?.state, JobState::Running);

    h.finish(claimed.lease, completed()).await?;
    h.backend
        .job_delete(&JobDeleteParams { id: running })
        .await?;
    let err = h
        .backend
        .job_delete(&JobDeleteParams { id: running })
        .await
        .expect_err("gone");
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
    let err = h
        .backend
        .job_delete(&JobDeleteParams { id: Uuid::now_v7() })
        .await
        .expect_err("never was");
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
    Ok(())
}

/// Retry many retries failed jobs only.
pub async fn retry_many_retries_failed_jobs_only(h: &Harness) -> anyhow::Result<()> {
    let mut ids = Vec::new();
    for queue in ["mail", "mail", "sms"] {
        ids.push(h.insert(job("k", queue)).await?);
    }
    let done = h.insert(job("k", "mail")).await?;
    let cancelled = h
        .insert(job("k", "mail").with_run_at(h.now() + secs(60)))
        .await?;
    h.backend
        .job_cancel(&JobCancelParams { id: cancelled })
        .await?;
    // FIFO: the three claims take the three failing jobs, then `done`.
    for queue in ["mail", "mail", "sms"] {
        let claimed = h.claim_one(queue).await?;
        let failed = Outcome::Failed {
            error: "no".to_owned(),
            duration_ms: 1,
        };
        h.finish(claimed.lease, failed).await?;
    }
    let claimed = h.claim_one("mail").await?;
    assert_eq!(claimed.lease.job_id, done);
    h.finish(claimed.lease, completed()).await?;

    h.advance(Duration::from_secs(5));
    let params = JobRetryManyParams {
        queue: Some("mail".to_owned()),
        kind: None,
    };
    let n = h.backend.job_retry_many(&params).await?;
    assert_eq!(n, 2, "the two failed mail jobs");
    for id in &ids[..2] {
        let record = h.get(*id).await?;
        assert_eq!(record.state, JobState::Available);
        assert_eq!(record.run_at, h.now());
        assert_eq!(record.finished_at, None);
        assert_eq!(
            record.attempt - record.uncounted,
            0,
            "a fresh set of attempts"
        );
        assert_eq!(record.errors.len(), 1, "the history is kept");
    }
    assert_eq!(h.get(ids[2]).await?.state, JobState::Failed, "other queue");
    assert_eq!(h.get(done).await?.state, JobState::Completed);
    assert_eq!(h.get(cancelled).await?.state, JobState::Cancelled);
    assert_eq!(h.claim("mail", 10).await?.len(), 2, "claimable at once");

    let all = JobRetryManyParams::default();
    assert_eq!(h.backend.job_retry_many(&all).await?, 1, "the sms job");
    assert_eq!(h.backend.job_retry_many(&all).await?, 0);
    Ok(())
}

/// Stats per minute count and time finished jobs.
pub async fn stats_per_minute_count_and_time_finished_jobs(h: &Harness) -> anyhow::Result<()> {
    // Minute 0: two jobs due at t0, started 2 s and 4 s later, ran 5 ms and 15 ms.
    let a = h.insert(job("k", "default")).await?;
    let b = h.insert(job("k", "default")).await?;
    h.advance(Duration::from_secs(2));
    let first = h.claim_one("default").await?;
    h.advance(Duration::from_secs(2));
    let second = h.claim_one("default").await?;
    assert_eq!((first.lease.job_id, second.lease.job_id), (a, b));
    h.finish(first.lease, Outcome::Completed { duration_ms: 5 })
        .await?;
    h.finish(second.lease, Outcome::Completed { duration_ms: 15 })
        .await?;
    // Minute 2: one job dead-lettered, due at once, started at once.
    h.advance(Duration::from_secs(120));
    h.insert(job("k", "default")).await?;
    let third = h.claim_one("default").await?;
    h.finish(
        third.lease,
        Outcome::Failed {
            error: "no".to_owned(),
            duration_ms: 1,
        },
    )
    .await?;
    // Something still running is not counted.
    h.insert(job("k", "default")).await?;
    h.claim_one("default").await?;

    let params = JobStatsParams {
        window: Duration::from_secs(3600),
    };
    let Some(stats) = h.stats() else {
        return Ok(());
    };
    let minutes = stats.job_stats_per_minute(&params).await?;
    let t0 = crate::t0();
    assert_eq!(minutes.len(), 2, "{minutes:?}");
    let m0 = &minutes[0];
    assert_eq!(m0.minute, t0);
    assert_eq!((m0.completed, m0.failed), (2, 0));
    assert!((m0.latency_avg_ms - 3000.0).abs() < 1e-6, "{m0:?}");
    assert!((m0.duration_avg_ms - 10.0).abs() < 1e-6, "{m0:?}");
    assert!(
        m0.latency_p95_ms >= 3800.0 && m0.latency_p95_ms <= 4000.0,
        "{m0:?}"
    );
    let m2 = &minutes[1];
    assert_eq!(m2.minute, t0 + secs(120));
    assert_eq!((m2.completed, m2.failed), (0, 1));
    assert!(m2.latency_avg_ms.abs() < 1e-6, "{m2:?}");

    // An hour after the last job finished, the window holds nothing.
    h.advance(Duration::from_secs(3601));
    assert!(stats.job_stats_per_minute(&params).await?.is_empty());
    Ok(())
}

/// A bulk retry retries every failed job it can: one whose unique key another job holds
/// meanwhile (or another failed job of the batch, retried first) stays failed, as its own
/// retry would refuse it, instead of refusing the whole batch.
pub async fn retry_many_skips_jobs_whose_unique_key_is_taken(h: &Harness) -> anyhow::Result<()> {
    let Some(store) = h.scheduling() else {
        return Ok(());
    };
    let fail_next = async || -> anyhow::Result<Uuid> {
        let claimed = h.claim_one("q").await?;
        let failed = Outcome::Failed {
            error: "no".to_owned(),
            duration_ms: 1,
        };
        h.finish(claimed.lease, failed).await?;
        Ok(claimed.lease.job_id)
    };
    let keyed = || job("k", "q").with_unique_key("sync:acme");
    // Two failed jobs of one key (the key is free once its holder failed), one failed
    // job without a key, one failed job whose key a waiting job holds now.
    store.job_upsert_many(&[keyed()]).await?;
    let first = fail_next().await?;
    store.job_upsert_many(&[keyed()]).await?;
    let second = fail_next().await?;
    h.insert(job("k", "q")).await?;
    let plain = fail_next().await?;
    store
        .job_upsert_many(&[job("k", "q").with_unique_key("sync:globex")])
        .await?;
    let taken = fail_next().await?;
    let holder = job("k", "q")
        .with_unique_key("sync:globex")
        .with_run_at(h.now() + secs(3600));
    store.job_upsert_many(std::slice::from_ref(&holder)).await?;

    let n = h
        .backend
        .job_retry_many(&JobRetryManyParams::default())
        .await?;
    assert_eq!(n, 2, "the plain job and one of the two sharing a key");
    assert_eq!(h.get(plain).await?.state, JobState::Available);
    let states = [h.get(first).await?.state, h.get(second).await?.state];
    assert!(
        states.contains(&JobState::Available) && states.contains(&JobState::Failed),
        "one of a key's failed jobs is retried, the other stays failed: {states:?}"
    );
    assert_eq!(
        h.get(taken).await?.state,
        JobState::Failed,
        "its key is held"
    );
    assert_eq!(h.get(holder.id).await?.state, JobState::Scheduled);
    assert_eq!(
        h.backend
            .job_retry_many(&JobRetryManyParams::default())
            .await?,
        0,
        "the rest are still held"
    );
    Ok(())
}
