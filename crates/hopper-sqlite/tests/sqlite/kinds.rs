//! A claim that names its kinds (what `hopper serve` asks when every worker declared the
//! kinds it runs) on SQLite, which applies the filter in limited and fair queues too (plain
//! queues: the conformance case `a_claim_of_some_kinds_leaves_the_others_untouched`).

use std::time::Duration;

use crate::common::harness;
use hopper_conformance::job;
use hopper_core::backend::{ClaimParams, JobGetParams};
use hopper_core::{NewJob, QueueStats, QueueUpdate};

/// Jobs of other kinds are left untouched in limited and fair queues: not claimed,
/// their `run_at` unmoved, so they do not churn and the queue's age stays true.
#[tokio::test]
async fn a_claim_of_some_kinds_leaves_the_others_untouched() -> anyhow::Result<()> {
    let h = harness().await?;
    h.backend
        .queue_update(&QueueUpdate {
            max_running: Some(Some(10)),
            ..QueueUpdate::new("limited")
        })
        .await?;
    for queue in ["limited", "fair"] {
        let group = |j: NewJob, g: &str| {
            if queue == "fair" { j.with_group(g) } else { j }
        };
        // Unserved jobs first, in several groups, so that they lead every order.
        let mut unserved = Vec::new();
        for g in ["a", "b", "c"] {
            let id = h.insert(group(job("other", queue), g)).await?;
            unserved.push(
                h.backend
                    .job_get(&JobGetParams { id })
                    .await?
                    .expect("the job"),
            );
        }
        h.advance(Duration::from_secs(1));
        let served = h.insert(group(job("k", queue), "d")).await?;
        let before = h.backend.queue_stats().await?;
        let age = |stats: &[QueueStats]| {
            stats
                .iter()
                .find(|q| q.queue == queue)
                .map(|q| q.oldest_available_secs)
        };

        let params = ClaimParams {
            queue: queue.to_owned(),
            node: h.node.id,
            limit: 2,
            lease: Duration::from_secs(30),
            kinds: Some(vec!["k".to_owned()]),
        };
        let mut claimed = Vec::new();
        // The fair claim may need a turn past the ring of unserved groups.
        for _ in 0..3 {
            claimed.extend(h.backend.job_claim(&params).await?);
        }
        let ids: Vec<_> = claimed.iter().map(|c| c.lease.job_id).collect();
        assert_eq!(
            ids,
            vec![served],
            "{queue}: only the served kind is claimed"
        );
        for before in unserved {
            let id = before.id;
            let after = h
                .backend
                .job_get(&JobGetParams { id })
                .await?
                .expect("the job");
            assert_eq!(after, before, "{queue}: not claimed, run_at unmoved");
        }
        assert_eq!(
            age(&h.backend.queue_stats().await?),
            age(&before),
            "{queue}: the queue's age is the unserved jobs'"
        );
    }
    Ok(())
}
