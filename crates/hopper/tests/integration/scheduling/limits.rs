//! Global limits per queue, across runtimes: concurrency and rate.

use std::sync::Arc;
use std::time::Duration;

use hopper::backend::ClaimParams;
use hopper::testing::TestDatabase;
use hopper::{Client, NewJob, RateLimit, TestClock};
use tokio::time::Instant;

use super::common::{Log, config, node, probe, start, start_on};

/// A queue limited to 5 running jobs never runs more than 5 at once across 4 runtimes of
/// 4 slots each, and does use all 5.
#[tokio::test]
async fn concurrency_limit_holds_across_four_runtimes() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = Client::new(db.backend());
    client.limit("capped", Some(5), None).await?;
    let jobs: Vec<NewJob> = (0..300).map(|_| probe("capped", "x", 10)).collect();
    client.insert_many(&jobs).await?;

    let log = Log::default();
    let mut handles = Vec::new();
    for _ in 0..4 {
        handles.push(start(&db, &log, config(&["capped"], 4)).await?);
    }
    // Sample the database's own count of running jobs while the runtimes work.
    let mut max_sampled = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while log.len() < 300 && Instant::now() < deadline {
        let running = db.queue_stats("capped").await?.running;
        max_sampled = max_sampled.max(running);
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    for handle in handles {
        handle.shutdown().await;
    }
    let overlap = log.max_overlap();
    println!(
        "runs: {}, max overlap of handlers: {overlap}, max running sampled: {max_sampled}",
        log.len()
    );
    assert_eq!(log.len(), 300);
    assert!(overlap <= 5, "{overlap} handlers ran at once");
    assert!(max_sampled <= 5, "{max_sampled} jobs were running at once");
    assert!(
        overlap >= 4,
        "the limit was not used: at most {overlap} at once"
    );
    Ok(())
}

/// A rate limit of 100 jobs/s holds over 10 s across two runtimes, on an injected clock
/// that moves 100 ms at a time: the bucket starts full (a tenth of a second's worth), and
/// each step lets exactly 10 more jobs start, however fast the runtimes claim, so 10 s let
/// exactly 1,000 start after the first 10, and no second more than 100.
#[tokio::test]
async fn rate_limit_holds_over_ten_seconds() -> anyhow::Result<()> {
    let clock = TestClock::new(hopper_conformance::t0());
    let db = TestDatabase::with_clock(Arc::new(clock.clone())).await?;
    let client = Client::new(db.backend());
    client
        .limit(
            "paced",
            None,
            Some(RateLimit::new(100, Duration::from_secs(1))),
        )
        .await?;
    let jobs: Vec<NewJob> = (0..3_000).map(|_| probe("paced", "x", 0)).collect();
    client.insert_many(&jobs).await?;

    let log = Log::default();
    let config = || config(&["paced"], 20).with_poll_interval(Duration::from_millis(20));
    let a = start_on(&db, &log, config(), &clock).await?;
    let b = start_on(&db, &log, config(), &clock).await?;
    let burst = 10;
    let step = chrono::Duration::milliseconds(100);
    for n in 0..=100 {
        if n > 0 {
            clock.advance(step);
        }
        let expected = burst + 10 * n;
        log.wait_until(Duration::from_secs(30), |runs| runs.len() >= expected)
            .await?;
        assert_eq!(log.len(), expected, "started by {n} steps of 100 ms");
    }
    a.shutdown().await;
    b.shutdown().await;
    let started = log.len();
    assert_eq!(started, burst + 1_000, "jobs started in 10 s at 100/s");
    Ok(())
}

/// A per-group limit of 2 holds for each group across two runtimes, while the groups
/// together use more than 2 slots.
#[tokio::test]
async fn per_group_limit_holds_for_every_group() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = Client::new(db.backend());
    client
        .update_queue(&hopper::QueueUpdate {
            max_running_per_group: Some(Some(2)),
            ..hopper::QueueUpdate::new("tenants")
        })
        .await?;
    let jobs: Vec<NewJob> = (0..150)
        .map(|i| {
            let group = ["a", "b", "c"][i % 3];
            probe("tenants", group, 10).with_group(group)
        })
        .collect();
    client.insert_many(&jobs).await?;
    let log = Log::default();
    let one = start(&db, &log, config(&["tenants"], 8)).await?;
    let two = start(&db, &log, config(&["tenants"], 8)).await?;
    log.wait_until(Duration::from_secs(60), |runs| runs.len() == 150)
        .await?;
    one.shutdown().await;
    two.shutdown().await;
    for group in ["a", "b", "c"] {
        let overlap = log.filtered(|r| r.label == group).max_overlap();
        println!("group {group}: at most {overlap} at once");
        assert!(overlap <= 2, "group {group} ran {overlap} at once");
    }
    assert!(log.max_overlap() > 2, "the groups did not run side by side");
    Ok(())
}

/// A node whose settings cache predates a change of limits (it claims in one round trip
/// with the cached limits) still claims within the new ones: the claim checks them against
/// the locked settings row and, when they differ, claims again with the row's.
#[tokio::test]
async fn a_stale_settings_cache_still_claims_within_the_new_limits() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let admin = Client::new(db.backend());
    let jobs: Vec<NewJob> = (0..20)
        .flat_map(|i| {
            [
                probe("plain", "p", 0),
                probe("grouped", "g", 0).with_group(if i % 2 == 0 { "a" } else { "b" }),
            ]
        })
        .collect();
    admin.insert_many(&jobs).await?;
    let worker = node(&db).await?;
    let claim = |queue: &str, limit| ClaimParams {
        queue: queue.into(),
        node: uuid::Uuid::now_v7(),
        limit,
        lease: Duration::from_secs(30),
        kinds: None,
    };
    for queue in ["plain", "grouped"] {
        admin.limit(queue, Some(100), None).await?;
        // Loads the worker's cache with the limit of 100.
        assert_eq!(
            worker.job_claim(&claim(queue, 1)).await?.len(),
            1,
            "{queue}"
        );
        admin.limit(queue, Some(3), None).await?;
        let got = worker.job_claim(&claim(queue, 10)).await?.len();
        assert_eq!(got, 2, "{queue}: 1 running, limit 3");
        admin
            .limit(
                queue,
                None,
                Some(RateLimit::new(1, Duration::from_secs(60))),
            )
            .await?;
        let got = worker.job_claim(&claim(queue, 10)).await?.len();
        assert_eq!(got, 1, "{queue}: a rate of 1 per minute (burst 1)");
    }
    Ok(())
}

/// Concurrent claims of a limited queue from one process are combined; each caller gets
/// what it asked for, and no job twice.
#[tokio::test]
async fn concurrent_claims_of_one_process_get_their_share_once() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let admin = Client::new(db.backend());
    admin.limit("shared", Some(1000), None).await?;
    let jobs: Vec<NewJob> = (0..100).map(|_| probe("shared", "s", 0)).collect();
    admin.insert_many(&jobs).await?;
    let worker = node(&db).await?;
    let params = ClaimParams {
        queue: "shared".into(),
        node: uuid::Uuid::now_v7(),
        limit: 10,
        lease: Duration::from_secs(30),
        kinds: None,
    };
    let claims = (0..8).map(|_| worker.job_claim(&params));
    let results = futures_util::future::try_join_all(claims).await?;
    let mut ids: Vec<uuid::Uuid> = Vec::new();
    for jobs in &results {
        assert_eq!(jobs.len(), 10);
        ids.extend(jobs.iter().map(|j| j.lease.job_id));
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 80);
    Ok(())
}
