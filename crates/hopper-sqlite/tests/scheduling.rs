//! Scheduling and control on SQLite: unique keys and their policies and windows, groups
//! taking turns, pause, global concurrency and rate limits, periodic ticks enqueued once.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{Store, job, t0};
use hopper_core::{
    Backend, CronAdvance, CronEntry, Error, InsertOutcome, JobState, NewJob, Outcome, Priority,
    QueueUpdate, RateLimit, UniquePolicy,
};
use serde_json::json;

fn secs(n: i64) -> chrono::Duration {
    chrono::Duration::seconds(n)
}

#[tokio::test]
async fn unique_keys_follow_their_policy() -> anyhow::Result<()> {
    let s = Store::new().await?;
    let first = job("k", "q").with_unique_key("user:42/welcome mail");
    let outcomes = s
        .backend
        .job_upsert_many(std::slice::from_ref(&first))
        .await?;
    assert_eq!(outcomes, vec![InsertOutcome::Inserted]);

    let ignored = job("k", "q").with_unique_key("user:42/welcome mail");
    let outcomes = s.backend.job_upsert_many(&[ignored]).await?;
    assert_eq!(
        outcomes,
        vec![InsertOutcome::Duplicate { existing: first.id }]
    );

    // Reject refuses the whole batch.
    let fresh = job("k", "q");
    let rejected = job("k", "q")
        .with_unique_key("user:42/welcome mail")
        .with_unique_policy(UniquePolicy::Reject);
    let result = s.backend.job_upsert_many(&[fresh.clone(), rejected]).await;
    assert!(matches!(result, Err(Error::Conflict(_))), "{result:?}");
    assert_eq!(
        s.backend.job_get(fresh.id).await?,
        None,
        "nothing of the batch written"
    );

    let replacement = NewJob::new("other", json!({ "v": 2 }))
        .with_queue("q")
        .with_priority(Priority::HIGH)
        .with_unique_key("user:42/welcome mail")
        .with_unique_policy(UniquePolicy::Replace);
    let outcomes = s.backend.job_upsert_many(&[replacement]).await?;
    assert_eq!(
        outcomes,
        vec![InsertOutcome::Replaced { existing: first.id }]
    );
    let stored = s.backend.job_get(first.id).await?.expect("kept its id");
    assert_eq!(
        (stored.kind.as_str(), stored.priority),
        ("other", Priority::HIGH)
    );
    assert_eq!(stored.args, json!({ "v": 2 }));

    // A running holder is not replaced; once it finished, the key is free again.
    let running = s.claim_one("q").await?;
    let late = job("k", "q")
        .with_unique_key("user:42/welcome mail")
        .with_unique_policy(UniquePolicy::Replace);
    let outcomes = s
        .backend
        .job_upsert_many(std::slice::from_ref(&late))
        .await?;
    assert_eq!(
        outcomes,
        vec![InsertOutcome::Duplicate { existing: first.id }]
    );
    s.finish(running.lease, Outcome::Completed { duration_ms: 1 })
        .await?;
    assert_eq!(
        s.backend.job_upsert_many(&[late]).await?,
        vec![InsertOutcome::Inserted]
    );

    // Within one batch, the second job with a key finds the first.
    let a = job("k", "q").with_unique_key("batch");
    let b = job("k", "q").with_unique_key("batch");
    assert_eq!(
        s.backend.job_upsert_many(&[a.clone(), b]).await?,
        vec![
            InsertOutcome::Inserted,
            InsertOutcome::Duplicate { existing: a.id }
        ]
    );
    // Plain inserts honour keys too (ignore: nothing written).
    let c = job("k", "q").with_unique_key("batch");
    s.backend.job_insert(&c).await?;
    assert_eq!(s.backend.job_get(c.id).await?, None);
    Ok(())
}

#[tokio::test]
async fn unique_windows_hold_after_the_job_finished() -> anyhow::Result<()> {
    let s = Store::new().await?;
    let hourly = |label: &str| {
        NewJob::new("report", json!({ "label": label }))
            .with_queue("q")
            .with_unique_key("daily-report")
            .with_unique_window(Duration::from_secs(3600))
    };
    let w1 = hourly("one");
    assert_eq!(
        s.backend.job_upsert_many(std::slice::from_ref(&w1)).await?,
        vec![InsertOutcome::Inserted]
    );
    let c = s.claim_one("q").await?;
    s.finish(c.lease, Outcome::Completed { duration_ms: 1 })
        .await?;
    s.advance(Duration::from_secs(60));
    assert_eq!(
        s.backend.job_upsert_many(&[hourly("two")]).await?,
        vec![InsertOutcome::Duplicate { existing: w1.id }],
        "same window, finished holder"
    );
    s.advance(Duration::from_secs(3600));
    assert_eq!(
        s.backend.job_upsert_many(&[hourly("three")]).await?,
        vec![InsertOutcome::Inserted],
        "next window"
    );
    Ok(())
}

#[tokio::test]
async fn groups_take_turns_whatever_their_backlog() -> anyhow::Result<()> {
    let s = Store::new().await?;
    // A plain job first: when the queue becomes grouped it joins the "no group" group.
    let plain = s.insert(job("k", "q")).await?;
    let mut jobs: Vec<NewJob> = (0..500).map(|_| job("k", "q").with_group("big")).collect();
    jobs.extend((0..3).map(|_| job("k", "q").with_group("small-a")));
    jobs.extend((0..3).map(|_| job("k", "q").with_group("small-b")));
    s.backend.job_insert_many(&jobs).await?;
    let settings = s.backend.queue_list().await?;
    assert!(settings.iter().any(|q| q.queue == "q" && q.grouped));
    assert_eq!(
        s.backend.job_get(plain).await?.map(|j| j.state),
        Some(JobState::Available)
    );

    let groups = |claimed: &[hopper_core::ClaimedJob]| -> HashMap<String, usize> {
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
    // Four groups, eight slots: two turns each. The "no group" group has one job only.
    let first = s.claim("q", 8).await?;
    let by_group = groups(&first);
    for g in ["big", "small-a", "small-b"] {
        assert_eq!(by_group.get(g), Some(&2), "{by_group:?}");
    }
    assert_eq!(by_group.get(""), Some(&1), "{by_group:?}");
    // The small groups drain in the next turns while the big one keeps its share.
    let second = s.claim("q", 6).await?;
    let by_group = groups(&second);
    assert_eq!(by_group.get("small-a"), Some(&1), "{by_group:?}");
    assert_eq!(by_group.get("small-b"), Some(&1), "{by_group:?}");
    assert!(
        by_group.get("big").copied().unwrap_or(0) >= 1,
        "{by_group:?}"
    );
    Ok(())
}

#[tokio::test]
async fn paused_queues_are_not_claimed_until_resumed() -> anyhow::Result<()> {
    let s = Store::new().await?;
    s.insert(job("k", "q")).await?;
    let paused = s
        .backend
        .queue_update(&QueueUpdate {
            paused: Some(true),
            ..QueueUpdate::new("q")
        })
        .await?;
    assert!(paused.paused);
    assert!(s.claim("q", 10).await?.is_empty());
    s.insert(job("k", "q")).await?;
    assert!(s.claim("q", 10).await?.is_empty(), "inserts still accepted");
    s.backend
        .queue_update(&QueueUpdate {
            paused: Some(false),
            ..QueueUpdate::new("q")
        })
        .await?;
    assert_eq!(s.claim("q", 10).await?.len(), 2);
    let listed = s.backend.queue_list().await?;
    assert_eq!(listed.len(), 1);
    assert!(!listed[0].paused && listed[0].is_plain());
    Ok(())
}

#[tokio::test]
async fn concurrency_limit_counts_running_jobs_of_every_node() -> anyhow::Result<()> {
    let s = Store::new().await?;
    for _ in 0..10 {
        s.insert(job("k", "q")).await?;
    }
    s.backend
        .queue_update(&QueueUpdate {
            max_running: Some(Some(3)),
            ..QueueUpdate::new("q")
        })
        .await?;
    let first = s.claim("q", 10).await?;
    assert_eq!(first.len(), 3);
    let other = s.another().await?;
    let from_other = other
        .job_claim(&hopper_core::ClaimParams {
            queue: "q".into(),
            node: uuid::Uuid::now_v7(),
            limit: 10,
            lease: Duration::from_secs(30),
        })
        .await?;
    assert!(from_other.is_empty(), "the limit holds across backends");
    s.finish(first[0].lease, Outcome::Completed { duration_ms: 1 })
        .await?;
    assert_eq!(s.claim("q", 10).await?.len(), 1);
    s.backend
        .queue_update(&QueueUpdate {
            max_running: Some(None),
            ..QueueUpdate::new("q")
        })
        .await?;
    assert_eq!(s.claim("q", 10).await?.len(), 6, "limit removed");
    Ok(())
}

#[tokio::test]
async fn rate_limit_refills_with_the_clock() -> anyhow::Result<()> {
    let s = Store::new().await?;
    for _ in 0..100 {
        s.insert(job("k", "q")).await?;
    }
    let rate = RateLimit {
        jobs: 10,
        per: Duration::from_secs(1),
        burst: 5,
    };
    s.backend
        .queue_update(&QueueUpdate {
            rate: Some(Some(rate)),
            ..QueueUpdate::new("q")
        })
        .await?;
    assert_eq!(
        s.claim("q", 100).await?.len(),
        5,
        "a full bucket: the burst"
    );
    assert_eq!(s.claim("q", 100).await?.len(), 0, "empty");
    s.advance(Duration::from_millis(300));
    assert_eq!(s.claim("q", 100).await?.len(), 3, "10/s for 0.3 s");
    s.advance(Duration::from_secs(60));
    assert_eq!(
        s.claim("q", 100).await?.len(),
        5,
        "never more than the burst"
    );
    Ok(())
}

#[tokio::test]
async fn periodic_ticks_are_enqueued_once() -> anyhow::Result<()> {
    let s = Store::new().await?;
    let entry = CronEntry {
        name: "nightly".into(),
        schedule: "0 3 * * *".into(),
        timezone: "Europe/Paris".into(),
        queue: "q".into(),
        kind: "report".into(),
        args: json!({ "full": true }),
        priority: Priority::LOW,
        max_attempts: 3,
        timeout_ms: 60_000,
        catch_up: false,
        next_run_at: t0() + secs(60),
        last_run_at: None,
        last_job_id: None,
    };
    s.backend
        .cron_register(std::slice::from_ref(&entry))
        .await?;
    // Re-registering with the same schedule keeps the stored next_run_at.
    let mut again = entry.clone();
    again.next_run_at = t0() + secs(3600);
    s.backend.cron_register(&[again]).await?;
    let listed = s.backend.cron_list().await?;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].next_run_at, t0() + secs(60));
    assert_eq!(listed[0].args, json!({ "full": true }));

    let tick = t0() + secs(60);
    let advance = CronAdvance {
        name: "nightly".into(),
        expected_next_run_at: tick,
        next_run_at: tick + secs(86_400),
        jobs: vec![(tick, NewJob::new("report", json!({})).with_queue("q"))],
    };
    assert!(s.backend.cron_advance(&advance).await?);
    assert!(
        !s.backend.cron_advance(&advance).await?,
        "a second node with the old next_run_at writes nothing"
    );
    let other = s.another().await?;
    assert!(!other.cron_advance(&advance).await?);
    let stats = s.backend.queue_stats().await?;
    assert_eq!(stats[0].scheduled, 1, "{stats:?}");
    let listed = s.backend.cron_list().await?;
    assert_eq!(listed[0].last_run_at, Some(tick));
    assert_eq!(listed[0].next_run_at, tick + secs(86_400));
    Ok(())
}

#[tokio::test]
async fn per_group_limit_caps_each_group() -> anyhow::Result<()> {
    let s = Store::new().await?;
    let mut jobs: Vec<NewJob> = (0..20).map(|_| job("k", "q").with_group("a")).collect();
    jobs.extend((0..20).map(|_| job("k", "q").with_group("b")));
    s.backend.job_insert_many(&jobs).await?;
    s.backend
        .queue_update(&QueueUpdate {
            max_running_per_group: Some(Some(2)),
            ..QueueUpdate::new("q")
        })
        .await?;
    assert_eq!(s.claim("q", 100).await?.len(), 4, "two per group");
    assert!(
        s.claim("q", 100).await?.is_empty(),
        "both groups at their limit"
    );
    Ok(())
}

#[tokio::test]
async fn a_job_running_when_its_queue_became_grouped_is_claimed_after_a_retry() -> anyhow::Result<()>
{
    let s = Store::new().await?;
    s.insert(job("k", "q")).await?;
    let running = s.claim_one("q").await?;
    s.insert(job("k", "q").with_group("tenant")).await?;
    let retry = Outcome::Retry {
        error: "again".into(),
        retry_in: Duration::ZERO,
        duration_ms: 1,
    };
    s.finish(running.lease, retry).await?;
    let claimed = s.claim("q", 10).await?;
    assert_eq!(
        claimed.len(),
        2,
        "the retried job is not invisible to the fair claim"
    );
    Ok(())
}

/// A claim of some kinds (what `hopper serve` does when every worker declared its kinds)
/// leaves the jobs of other kinds untouched, in plain, limited and fair queues: not
/// claimed, their `run_at` unmoved, so they do not churn and the queue's age stays true.
#[tokio::test]
async fn a_claim_of_some_kinds_leaves_the_others_untouched() -> anyhow::Result<()> {
    let s = Store::new().await?;
    s.backend
        .queue_update(&QueueUpdate {
            max_running: Some(Some(10)),
            ..QueueUpdate::new("limited")
        })
        .await?;
    for queue in ["plain", "limited", "fair"] {
        let group = |j: NewJob, g: &str| {
            if queue == "fair" { j.with_group(g) } else { j }
        };
        // Unserved jobs first, in several groups, so that they lead every order.
        let mut unserved = Vec::new();
        for g in ["a", "b", "c"] {
            let id = s.insert(group(job("other", queue), g)).await?;
            unserved.push(s.backend.job_get(id).await?.expect("the job"));
        }
        s.advance(Duration::from_secs(1));
        let served = s.insert(group(job("k", queue), "d")).await?;
        let before = s.backend.queue_stats().await?;
        let age = |stats: &[hopper_core::QueueStats]| {
            stats
                .iter()
                .find(|q| q.queue == queue)
                .map(|q| q.oldest_available_secs)
        };

        let params = hopper_core::ClaimParams {
            queue: queue.to_owned(),
            node: s.node.id,
            limit: 2,
            lease: Duration::from_secs(30),
        };
        let kinds = ["k".to_owned()];
        let mut claimed = Vec::new();
        // The fair claim may need a turn past the ring of unserved groups.
        for _ in 0..3 {
            claimed.extend(s.backend.job_claim_kinds(&params, &kinds).await?);
        }
        let ids: Vec<_> = claimed.iter().map(|c| c.lease.job_id).collect();
        assert_eq!(
            ids,
            vec![served],
            "{queue}: only the served kind is claimed"
        );
        for before in unserved {
            let after = s.backend.job_get(before.id).await?.expect("the job");
            assert_eq!(after, before, "{queue}: not claimed, run_at unmoved");
        }
        assert_eq!(
            age(&s.backend.queue_stats().await?),
            age(&before),
            "{queue}: the queue's age is the unserved jobs'"
        );
    }
    Ok(())
}
