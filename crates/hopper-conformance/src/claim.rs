//! Claiming: order, queue, limit, the lease granted, and exclusivity.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use hopper_core::backend::{ClaimParams, JobCancelParams};
use hopper_core::{JobId, JobState, NewJob, Priority};
use serde_json::json;

use crate::{Harness, LEASE, completed, job, secs};

/// Claims one job at a time until the queue is empty; returns the ids in claim order.
async fn drain_one_by_one(h: &Harness, queue: &str) -> anyhow::Result<Vec<JobId>> {
    let mut order = Vec::new();
    loop {
        let claimed = h.claim(queue, 1).await?;
        match claimed.as_slice() {
            [] => return Ok(order),
            [one] => order.push(one.lease.job_id),
            more => anyhow::bail!("limit 1 claimed {}", more.len()),
        }
    }
}

/// A claim that names its kinds (what `hopper serve` asks when every worker declared the
/// kinds it runs) takes only jobs of those kinds and leaves the others untouched: not
/// claimed, their `run_at` unmoved, so they do not churn and the queue's age stays true.
pub async fn a_claim_of_some_kinds_leaves_the_others_untouched(h: &Harness) -> anyhow::Result<()> {
    // Unserved jobs first, so that they lead the claim order.
    let mut unserved = Vec::new();
    for _ in 0..3 {
        let id = h.insert(job("other", "default")).await?;
        unserved.push(h.get(id).await?);
    }
    h.advance(Duration::from_secs(1));
    let served = h.insert(job("k", "default")).await?;
    let claimed = h
        .backend
        .job_claim(&ClaimParams {
            queue: "default".to_owned(),
            node: h.node.id,
            limit: 2,
            lease: LEASE,
            kinds: Some(vec!["k".to_owned()]),
        })
        .await?;
    let ids: Vec<JobId> = claimed.iter().map(|c| c.lease.job_id).collect();
    assert_eq!(ids, vec![served], "only the served kind is claimed");
    for before in unserved {
        assert_eq!(
            h.get(before.id).await?,
            before,
            "not claimed, run_at unmoved"
        );
    }
    Ok(())
}

/// Claim takes high before normal before low.
pub async fn claim_takes_high_before_normal_before_low(h: &Harness) -> anyhow::Result<()> {
    let mut by_priority = Vec::new();
    for priority in [
        Priority::LOW,
        Priority::NORMAL,
        Priority::HIGH,
        Priority::LOW,
        Priority::HIGH,
        Priority::NORMAL,
    ] {
        let id = h
            .insert(job("p", "default").with_priority(priority))
            .await?;
        by_priority.push((priority, id));
    }
    // Stable sort: within a priority, insertion order.
    by_priority.sort_by_key(|(p, _)| *p);
    let expected: Vec<JobId> = by_priority.iter().map(|(_, id)| *id).collect();
    assert_eq!(drain_one_by_one(h, "default").await?, expected);
    Ok(())
}

/// Claim is fifo within a priority.
pub async fn claim_is_fifo_within_a_priority(h: &Harness) -> anyhow::Result<()> {
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(h.insert(job("fifo", "default")).await?);
    }
    // A job inserted last but due earlier goes first: FIFO is by due time, then by id.
    let early = h
        .insert(job("fifo", "default").with_run_at(h.now() - secs(5)))
        .await?;
    ids.insert(0, early);
    assert_eq!(drain_one_by_one(h, "default").await?, ids);
    Ok(())
}

/// Claim takes only the requested queue and at most limit.
pub async fn claim_takes_only_the_requested_queue_and_at_most_limit(
    h: &Harness,
) -> anyhow::Result<()> {
    let mut in_a = HashSet::new();
    for n in 0..5 {
        in_a.insert(h.insert(job("q", "a")).await?);
        h.insert(job("q", "b").with_priority(Priority(-(n as i16))))
            .await?;
    }
    let first = h.claim("a", 3).await?;
    assert_eq!(first.len(), 3);
    let second = h.claim("a", 10).await?;
    assert_eq!(second.len(), 2);
    assert!(h.claim("a", 10).await?.is_empty());
    let claimed: HashSet<JobId> = first
        .iter()
        .chain(&second)
        .map(|c| c.lease.job_id)
        .collect();
    assert_eq!(claimed, in_a);
    assert!(first.iter().chain(&second).all(|c| c.queue == "a"));
    let b = h.backend.queue_stats().await?;
    let b = b.iter().find(|s| s.queue == "b").expect("queue b counted");
    assert_eq!((b.available, b.running), (5, 0));
    assert!(h.claim("a", 0).await?.is_empty(), "limit 0 claims nothing");
    Ok(())
}

/// Claim grants a lease capped by the job timeout.
pub async fn claim_grants_a_lease_capped_by_the_job_timeout(h: &Harness) -> anyhow::Result<()> {
    let short = h
        .insert(
            NewJob::new("lease", json!([1, "two"]))
                .with_timeout(Duration::from_secs(5))
                .with_max_attempts(4),
        )
        .await?;
    let long = h
        .insert(job("lease", "default").with_timeout(Duration::from_secs(600)))
        .await?;
    let mut claimed = h.claim("default", 2).await?;
    claimed.sort_by_key(|c| c.lease.job_id);
    assert_eq!(claimed.len(), 2);
    let c = &claimed[0];
    assert_eq!(c.lease.job_id, short);
    assert_eq!(c.lease.attempt, 1);
    assert_eq!(c.counted_attempt, 1);
    assert_eq!(c.max_attempts, 4);
    assert_eq!(c.timeout, Duration::from_secs(5));
    assert_eq!(c.args, json!([1, "two"]));
    assert_eq!((c.kind.as_str(), c.queue.as_str()), ("lease", "default"));
    assert_eq!(c.run_at, h.now());

    let short = h.get(short).await?;
    assert_eq!(short.state, JobState::Running);
    assert_eq!(short.attempt, 1);
    assert_eq!(short.node_id, Some(h.node.id));
    assert_eq!(short.attempted_at, Some(h.now()));
    assert_eq!(short.lease_expires_at, Some(h.now() + secs(5)));
    let long = h.get(long).await?;
    assert_eq!(
        long.lease_expires_at,
        Some(h.now() + chrono::Duration::from_std(LEASE)?)
    );
    Ok(())
}

/// Claim skips scheduled running and finished jobs.
pub async fn claim_skips_scheduled_running_and_finished_jobs(h: &Harness) -> anyhow::Result<()> {
    h.insert(job("s", "default").with_run_at(h.now() + secs(1)))
        .await?;
    let running = h.insert(job("s", "default")).await?;
    let done = h.insert(job("s", "default")).await?;
    let cancelled = h.insert(job("s", "default")).await?;
    let waiting = h.insert(job("s", "default")).await?;
    let first = h.claim("default", 2).await?;
    let ids: HashSet<JobId> = first.iter().map(|c| c.lease.job_id).collect();
    assert_eq!(ids, [running, done].into());
    let done_lease = first
        .iter()
        .find(|c| c.lease.job_id == done)
        .expect("claimed")
        .lease;
    h.finish(done_lease, completed()).await?;
    h.backend
        .job_cancel(&JobCancelParams { id: cancelled })
        .await?;
    let rest = h.claim("default", 10).await?;
    let rest: Vec<JobId> = rest.iter().map(|c| c.lease.job_id).collect();
    assert_eq!(rest, vec![waiting]);
    Ok(())
}

/// Concurrent claims never hand out a job twice.
pub async fn concurrent_claims_never_hand_out_a_job_twice(h: &Harness) -> anyhow::Result<()> {
    const JOBS: usize = 400;
    let jobs: Vec<NewJob> = (0..JOBS).map(|_| job("race", "default")).collect();
    h.backend.job_insert_many(&jobs).await?;
    let backend = h.backend.clone();
    let node = h.node.id;
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let backend = Arc::clone(&backend);
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let claimed = backend
                    .job_claim(&hopper_core::backend::ClaimParams {
                        queue: "default".into(),
                        node,
                        limit: 7,
                        lease: LEASE,
                        kinds: None,
                    })
                    .await?;
                if claimed.is_empty() {
                    return anyhow::Ok(mine);
                }
                mine.extend(claimed.into_iter().map(|c| c.lease.job_id));
            }
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    let unique: HashSet<JobId> = all.iter().copied().collect();
    assert_eq!(all.len(), JOBS, "every job claimed exactly once");
    assert_eq!(unique.len(), JOBS);
    Ok(())
}
