//! Queue control (docs/scheduling.md): pause, global concurrency limits, per-group limits
//! and rate limits, kept in the store so they hold for every node.

use std::time::Duration;

use hopper_core::{QueueUpdate, RateLimit};
use uuid::Uuid;

use crate::{Harness, LEASE, completed, job};

/// A paused queue hands out nothing until resumed; inserts are still accepted.
pub async fn paused_queues_are_not_claimed_until_resumed(h: &Harness) -> anyhow::Result<()> {
    h.insert(job("k", "q")).await?;
    let paused = h
        .backend
        .queue_update(&QueueUpdate {
            paused: Some(true),
            ..QueueUpdate::new("q")
        })
        .await?;
    assert!(paused.paused);
    assert!(h.claim("q", 10).await?.is_empty());
    h.insert(job("k", "q")).await?;
    assert!(h.claim("q", 10).await?.is_empty(), "inserts still accepted");
    h.backend
        .queue_update(&QueueUpdate {
            paused: Some(false),
            ..QueueUpdate::new("q")
        })
        .await?;
    assert_eq!(h.claim("q", 10).await?.len(), 2);
    let listed = h.backend.queue_list().await?;
    assert_eq!(listed.len(), 1);
    assert!(!listed[0].paused && listed[0].is_plain());
    Ok(())
}

/// A concurrency limit counts the running jobs of every node, and can be removed.
pub async fn concurrency_limit_counts_running_jobs_of_every_node(
    h: &Harness,
) -> anyhow::Result<()> {
    for _ in 0..10 {
        h.insert(job("k", "q")).await?;
    }
    h.backend
        .queue_update(&QueueUpdate {
            max_running: Some(Some(3)),
            ..QueueUpdate::new("q")
        })
        .await?;
    let first = h.claim("q", 10).await?;
    assert_eq!(first.len(), 3);
    let other = h.claim_as(Uuid::now_v7(), "q", 10, LEASE).await?;
    assert!(other.is_empty(), "the limit holds for another node");
    h.finish(first[0].lease, completed()).await?;
    assert_eq!(h.claim("q", 10).await?.len(), 1);
    h.backend
        .queue_update(&QueueUpdate {
            max_running: Some(None),
            ..QueueUpdate::new("q")
        })
        .await?;
    assert_eq!(h.claim("q", 10).await?.len(), 6, "limit removed");
    Ok(())
}

/// A per-group limit caps each group on its own.
pub async fn per_group_limit_caps_each_group(h: &Harness) -> anyhow::Result<()> {
    let mut jobs: Vec<_> = (0..20).map(|_| job("k", "q").with_group("a")).collect();
    jobs.extend((0..20).map(|_| job("k", "q").with_group("b")));
    h.backend.job_insert_many(&jobs).await?;
    h.backend
        .queue_update(&QueueUpdate {
            max_running_per_group: Some(Some(2)),
            ..QueueUpdate::new("q")
        })
        .await?;
    assert_eq!(h.claim("q", 100).await?.len(), 4, "two per group");
    assert!(
        h.claim("q", 100).await?.is_empty(),
        "both groups at their limit"
    );
    Ok(())
}

/// A new rate limit starts with a full bucket (its burst), refills with the backend's
/// clock, and never holds more than the burst.
pub async fn rate_limit_refills_with_the_clock(h: &Harness) -> anyhow::Result<()> {
    h.backend.job_insert_many(&hundred_jobs()).await?;
    h.backend.queue_update(&set_rate(TEN_PER_SECOND)).await?;
    assert_eq!(
        h.claim("q", 100).await?.len(),
        5,
        "a full bucket: the burst"
    );
    assert_eq!(h.claim("q", 100).await?.len(), 0, "empty");
    h.advance(Duration::from_millis(300));
    assert_eq!(h.claim("q", 100).await?.len(), 3, "10/s for 0.3 s");
    h.advance(Duration::from_secs(60));
    assert_eq!(
        h.claim("q", 100).await?.len(),
        5,
        "never more than the burst"
    );
    Ok(())
}

/// Setting a queue's rate limit to the values it already has (a deploy script or every
/// node's start-up applying its configuration) leaves the bucket as it is: only a new or
/// changed rate starts full, or each repetition would let another burst through.
pub async fn setting_the_same_rate_again_does_not_refill_the_bucket(
    h: &Harness,
) -> anyhow::Result<()> {
    h.backend.job_insert_many(&hundred_jobs()).await?;
    let rate = TEN_PER_SECOND;
    h.backend.queue_update(&set_rate(rate)).await?;
    assert_eq!(h.claim("q", 100).await?.len(), 5, "a new rate: its burst");
    for _ in 0..3 {
        h.backend.queue_update(&set_rate(rate)).await?;
        assert_eq!(h.claim("q", 100).await?.len(), 0, "the same rate again");
    }
    // Other settings of the queue changed meanwhile leave the bucket as it is too.
    h.backend
        .queue_update(&QueueUpdate {
            max_running: Some(Some(50)),
            paused: Some(false),
            ..QueueUpdate::new("q")
        })
        .await?;
    assert_eq!(h.claim("q", 100).await?.len(), 0, "another setting changed");
    h.advance(Duration::from_millis(300));
    assert_eq!(
        h.claim("q", 100).await?.len(),
        3,
        "the bucket refills as before"
    );
    let changed = RateLimit { burst: 7, ..rate };
    h.backend.queue_update(&set_rate(changed)).await?;
    assert_eq!(
        h.claim("q", 100).await?.len(),
        7,
        "a changed rate starts full"
    );
    Ok(())
}

/// 10 jobs a second with a burst of 5.
const TEN_PER_SECOND: RateLimit = RateLimit {
    jobs: 10,
    per: Duration::from_secs(1),
    burst: 5,
};

/// A hundred jobs of queue `q`.
fn hundred_jobs() -> Vec<hopper_core::NewJob> {
    (0..100).map(|_| job("k", "q")).collect()
}

/// Sets queue `q`'s rate limit to `rate`.
fn set_rate(rate: RateLimit) -> QueueUpdate {
    QueueUpdate {
        rate: Some(Some(rate)),
        ..QueueUpdate::new("q")
    }
}
