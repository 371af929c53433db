//! Claims that name their kinds ([`ClaimParams::kinds`], what `hopper serve` asks when every
//! worker with room in a queue declared the kinds it runs): in every kind of queue, jobs of
//! other kinds are not claimed and not touched, so they do not churn and the queue's age
//! stays true.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use anyhow::ensure;
use hopper_core::backend::{ClaimParams, ClaimedJob};
use hopper_core::{JobId, JobRecord, NewJob, QueueUpdate, RateLimit};

use crate::{Harness, LEASE, job};

impl Harness {
    /// Claims up to `limit` jobs of `queue` of the given `kinds` for [`Harness::node`].
    pub async fn claim_kinds(
        &self,
        queue: &str,
        limit: u32,
        kinds: &[&str],
    ) -> anyhow::Result<Vec<ClaimedJob>> {
        Ok(self
            .backend
            .job_claim(&kinds_params(self, queue, limit, kinds))
            .await?)
    }
}

fn kinds_params(h: &Harness, queue: &str, limit: u32, kinds: &[&str]) -> ClaimParams {
    ClaimParams {
        queue: queue.to_owned(),
        node: h.node.id,
        limit,
        lease: LEASE,
        kinds: Some(kinds.iter().map(|k| (*k).to_owned()).collect()),
    }
}

/// Inserts three jobs of kind `other` (in groups `a`, `b`, `c` when `grouped`), then, a
/// second later, one of kind `k` (group `d`); claims kind `k` only, in up to three claims of
/// two (a fair claim may need a turn past groups that hold only other kinds). Checks that
/// exactly the `k` job was claimed and the others are as they were, `run_at` included, and
/// that the queue's age is still theirs.
async fn only_the_asked_kind_is_claimed(
    h: &Harness,
    queue: &str,
    grouped: bool,
) -> anyhow::Result<()> {
    let in_group = |j: NewJob, g: &str| if grouped { j.with_group(g) } else { j };
    let mut unserved: Vec<JobRecord> = Vec::new();
    for g in ["a", "b", "c"] {
        let id = h.insert(in_group(job("other", queue), g)).await?;
        unserved.push(h.get(id).await?);
    }
    h.advance(Duration::from_secs(1));
    let served = h.insert(in_group(job("k", queue), "d")).await?;
    let age = || async {
        let stats = h.backend.queue_stats().await?;
        anyhow::Ok(
            stats
                .into_iter()
                .find(|s| s.queue == queue)
                .map(|s| s.oldest_available_secs),
        )
    };
    let age_before = age().await?;

    let mut claimed = Vec::new();
    for _ in 0..3 {
        claimed.extend(h.claim_kinds(queue, 2, &["k"]).await?);
    }
    let ids: Vec<JobId> = claimed.iter().map(|c| c.lease.job_id).collect();
    ensure!(
        ids == vec![served],
        "{queue}: only the job of the asked kind is claimed, got {ids:?}"
    );
    for before in unserved {
        let after = h.get(before.id).await?;
        ensure!(
            after == before,
            "{queue}: a job of another kind was touched:\n{before:?}\n{after:?}"
        );
    }
    ensure!(
        age().await? == age_before,
        "{queue}: the queue's age is its unserved jobs'"
    );
    Ok(())
}

/// A plain queue claims only the asked kinds.
pub async fn a_plain_queue_claims_only_the_asked_kinds(h: &Harness) -> anyhow::Result<()> {
    only_the_asked_kind_is_claimed(h, "plain", false).await
}

/// A queue with a concurrency limit or a rate limit claims only the asked kinds, and its
/// concurrency limit still counts running jobs of every kind.
pub async fn a_limited_queue_claims_only_the_asked_kinds(h: &Harness) -> anyhow::Result<()> {
    h.backend
        .queue_update(&QueueUpdate {
            max_running: Some(Some(10)),
            ..QueueUpdate::new("capped")
        })
        .await?;
    only_the_asked_kind_is_claimed(h, "capped", false).await?;
    let rate = RateLimit {
        jobs: 100,
        per: Duration::from_secs(1),
        burst: 100,
    };
    h.backend
        .queue_update(&QueueUpdate {
            rate: Some(Some(rate)),
            ..QueueUpdate::new("rated")
        })
        .await?;
    only_the_asked_kind_is_claimed(h, "rated", false).await?;

    // Two running jobs of another kind fill two of the three slots: one job of `k` is
    // claimed, not three.
    h.backend
        .queue_update(&QueueUpdate {
            max_running: Some(Some(3)),
            ..QueueUpdate::new("full")
        })
        .await?;
    for _ in 0..2 {
        h.insert(job("other", "full")).await?;
    }
    ensure!(h.claim("full", 2).await?.len() == 2, "two others running");
    for _ in 0..5 {
        h.insert(job("k", "full")).await?;
    }
    let got = h.claim_kinds("full", 10, &["k"]).await?;
    ensure!(
        got.len() == 1 && got[0].kind == "k",
        "the limit counts running jobs of every kind: got {got:?}"
    );
    Ok(())
}

/// A grouped queue, with or without a per-group limit, claims only the asked kinds, and
/// reaches a group beyond groups that hold only other kinds.
pub async fn a_fair_queue_claims_only_the_asked_kinds(h: &Harness) -> anyhow::Result<()> {
    only_the_asked_kind_is_claimed(h, "fair", true).await?;
    h.backend
        .queue_update(&QueueUpdate {
            max_running_per_group: Some(Some(5)),
            ..QueueUpdate::new("fair_capped")
        })
        .await?;
    only_the_asked_kind_is_claimed(h, "fair_capped", true).await
}

/// Concurrent claims of one limited queue asking for different kinds (a backend may
/// combine concurrent claims of a queue into one statement) each get only their kinds, and
/// no job twice.
pub async fn concurrent_claims_of_different_kinds_get_only_theirs(
    h: &Harness,
) -> anyhow::Result<()> {
    const JOBS: usize = 300;
    h.backend
        .queue_update(&QueueUpdate {
            max_running: Some(Some(1_000)),
            ..QueueUpdate::new("mixed")
        })
        .await?;
    let kinds = ["x", "y", "z"];
    let jobs: Vec<NewJob> = (0..JOBS).map(|n| job(kinds[n % 3], "mixed")).collect();
    h.backend.job_insert_many(&jobs).await?;
    let mut tasks = Vec::new();
    for n in 0..9 {
        let backend = Arc::clone(&h.backend);
        let mine = kinds[n % 3];
        let params = kinds_params(h, "mixed", 3, &[mine]);
        tasks.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let claimed = backend.job_claim(&params).await?;
                if claimed.is_empty() {
                    return anyhow::Ok((mine, got));
                }
                got.extend(claimed);
            }
        }));
    }
    let mut all = HashSet::new();
    for task in tasks {
        let (mine, got) = task.await??;
        for c in got {
            ensure!(c.kind == mine, "a claim of {mine} was handed a {}", c.kind);
            ensure!(
                all.insert(c.lease.job_id),
                "{} handed out twice",
                c.lease.job_id
            );
        }
    }
    ensure!(
        all.len() == JOBS,
        "every job claimed: {} of {JOBS}",
        all.len()
    );
    Ok(())
}
