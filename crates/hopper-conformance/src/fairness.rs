//! Groups (tenants) take turns in a grouped queue, whatever their backlog.

use std::collections::HashMap;
use std::time::Duration;

use hopper_core::backend::{ClaimedJob, Outcome};
use hopper_core::{JobState, NewJob};

use crate::{Harness, job};

/// Groups take turns whatever their backlog; the jobs without a group count as one group.
pub async fn groups_take_turns_whatever_their_backlog(h: &Harness) -> anyhow::Result<()> {
    // A plain job first: when the queue becomes grouped it joins the "no group" group.
    let plain = h.insert(job("k", "q")).await?;
    let mut jobs: Vec<NewJob> = (0..500).map(|_| job("k", "q").with_group("big")).collect();
    jobs.extend((0..3).map(|_| job("k", "q").with_group("small-a")));
    jobs.extend((0..3).map(|_| job("k", "q").with_group("small-b")));
    h.backend.job_insert_many(&jobs).await?;
    let settings = h.backend.queue_list().await?;
    assert!(settings.iter().any(|q| q.queue == "q" && q.grouped));
    assert_eq!(h.get(plain).await?.state, JobState::Available);

    let groups = |claimed: &[ClaimedJob]| -> HashMap<String, usize> {
        let mut by_group = HashMap::new();
        for c in claimed {
            let label = jobs
                .iter()
                .find(|j| j.id == c.lease.job_id)
                .and_then(|j| j.group.clone())
                .unwrap_or_default();
            *by_group.entry(label).or_insert(0) += 1;
        }
        by_group
    };
    // Four groups, eight slots: two turns each. The "no group" group has one job only; its
    // second turn may go to a group that still has jobs (PostgreSQL fills the claim) or
    // stay empty (SQLite).
    let first = h.claim("q", 8).await?;
    let by_group = groups(&first);
    for g in ["small-a", "small-b"] {
        assert_eq!(by_group.get(g), Some(&2), "{by_group:?}");
    }
    let big = by_group.get("big").copied().unwrap_or(0);
    assert!((2..=3).contains(&big), "{by_group:?}");
    assert_eq!(by_group.get(""), Some(&1), "{by_group:?}");
    // The small groups drain in the next turns while the big one keeps its share.
    let second = h.claim("q", 6).await?;
    let by_group = groups(&second);
    assert_eq!(by_group.get("small-a"), Some(&1), "{by_group:?}");
    assert_eq!(by_group.get("small-b"), Some(&1), "{by_group:?}");
    assert!(
        by_group.get("big").copied().unwrap_or(0) >= 1,
        "{by_group:?}"
    );
    Ok(())
}

/// A job that was running when its queue became grouped is claimed again after a retry.
pub async fn a_job_running_when_its_queue_became_grouped_is_claimed_after_a_retry(
    h: &Harness,
) -> anyhow::Result<()> {
    h.insert(job("k", "q")).await?;
    let running = h.claim_one("q").await?;
    h.insert(job("k", "q").with_group("tenant")).await?;
    let retry = Outcome::Retry {
        error: "again".into(),
        retry_in: Duration::ZERO,
        duration_ms: 1,
    };
    h.finish(running.lease, retry).await?;
    let claimed = h.claim("q", 10).await?;
    assert_eq!(
        claimed.len(),
        2,
        "the retried job is not invisible to the fair claim"
    );
    Ok(())
}
