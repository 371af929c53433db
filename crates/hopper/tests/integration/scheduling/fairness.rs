//! Tenant fairness within a queue (groups take turns) and capacity shares across queues
//! (weights).

use std::collections::HashMap;
use std::time::Duration;

use hopper::testing::TestDatabase;
use hopper::{Client, NewJob};

use super::common::{Log, config, probe, start};

/// Group A has 10,000 jobs queued, then group B enqueues 100: with concurrency 10, all of
/// B's jobs finish before 500 of A's have run (without groups, B would wait for all 10,000).
#[tokio::test]
async fn a_small_group_is_not_starved_by_a_big_backlog() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = Client::new(db.backend());
    let a: Vec<NewJob> = (0..10_000)
        .map(|_| probe("tenants", "A", 1).with_group("A"))
        .collect();
    client.insert_many(&a).await?;
    let b: Vec<NewJob> = (0..100)
        .map(|_| probe("tenants", "B", 1).with_group("B"))
        .collect();
    client.insert_many(&b).await?;

    let log = Log::default();
    let handle = start(&db, &log, config(&["tenants"], 10)).await?;
    log.wait_until(Duration::from_secs(60), |runs| {
        runs.iter().filter(|r| r.label == "B").count() == 100
    })
    .await?;
    let runs = log.runs();
    handle.shutdown().await;

    let last_b = runs.iter().rposition(|r| r.label == "B").expect("B ran");
    let a_before = runs[..last_b].iter().filter(|r| r.label == "A").count();
    println!("A jobs finished before B's last: {a_before}");
    assert!(
        a_before < 500,
        "{a_before} of A's jobs finished before B's 100 were done"
    );
    Ok(())
}

/// Within a group, priority is strict and FIFO holds within a priority.
#[tokio::test]
async fn priorities_stay_strict_within_a_group() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let backend = db.backend();
    let client = Client::new(backend.clone());
    let mut jobs = Vec::new();
    for (i, prio) in [3, 2, 1, 3, 1].into_iter().enumerate() {
        jobs.push(
            probe("prio", &format!("A{i}"), 0)
                .with_group("A")
                .with_priority(hopper::Priority(prio)),
        );
    }
    jobs.push(probe("prio", "B0", 0).with_group("B"));
    client.insert_many(&jobs).await?;
    let node = uuid::Uuid::now_v7();
    let mut order = Vec::new();
    loop {
        let claimed = backend
            .job_claim(&hopper::backend::ClaimParams {
                queue: "prio".into(),
                node,
                limit: 1,
                lease: Duration::from_secs(30),
                kinds: None,
            })
            .await?;
        let Some(job) = claimed.into_iter().next() else {
            break;
        };
        order.push(job.args["label"].as_str().unwrap_or_default().to_owned());
    }
    let a: Vec<&str> = order
        .iter()
        .filter(|l| l.starts_with('A'))
        .map(String::as_str)
        .collect();
    assert_eq!(a, ["A2", "A4", "A1", "A0", "A3"]);
    // B had its turn right after A's first job, not after all of A's.
    assert_eq!(order.iter().position(|l| l == "B0"), Some(1), "{order:?}");
    Ok(())
}

/// A runtime serving two queues with weights 3 and 1 gives them 3/4 and 1/4 of its slots
/// while both have work.
#[tokio::test]
async fn queue_weights_share_a_runtimes_slots() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = Client::new(db.backend());
    let mut jobs: Vec<NewJob> = (0..400).map(|_| probe("heavy", "heavy", 20)).collect();
    jobs.extend((0..400).map(|_| probe("light", "light", 20)));
    client.insert_many(&jobs).await?;
    let log = Log::default();
    let mut cfg = config(&["heavy", "light"], 8);
    cfg.queue_weights = HashMap::from([("heavy".to_owned(), 3), ("light".to_owned(), 1)]);
    let handle = start(&db, &log, cfg).await?;
    log.wait_until(Duration::from_secs(60), |runs| runs.len() >= 200)
        .await?;
    let runs = log.runs();
    handle.shutdown().await;
    let heavy = runs[..200].iter().filter(|r| r.queue == "heavy").count();
    println!("heavy share of the first 200 runs: {heavy}");
    // 3/4 of 200 = 150; allow for the rounding of shares and batch edges.
    assert!((135..=165).contains(&heavy), "heavy ran {heavy} of 200");
    Ok(())
}

/// A job without a group that slipped into a grouped queue (its inserter's settings cache
/// did not know yet) still runs; and every job of a queue becoming grouped joins the group
/// '', including running ones, so a retry after the change is seen by the fair claim.
#[tokio::test]
async fn stragglers_without_a_group_are_still_claimed() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let backend = db.backend();
    let client = Client::new(backend.clone());
    let early = client.insert(probe("mixed", "early", 0)).await?;
    let node = uuid::Uuid::now_v7();
    let claim = |limit| hopper::backend::ClaimParams {
        queue: "mixed".into(),
        node,
        limit,
        lease: Duration::from_secs(30),
        kinds: None,
    };
    let running = backend.job_claim(&claim(1)).await?;
    assert_eq!(running.len(), 1);
    client
        .insert(probe("mixed", "grouped", 0).with_group("A"))
        .await?;
    let record = client.job(early).await?.expect("exists");
    assert_eq!(record.state, hopper::JobState::Running);
    // A straggler: inserted as a stale process would, with no group.
    let conn = db.pg().pool().get().await?;
    conn.batch_execute(&format!(
        "INSERT INTO {}.jobs (id, queue, kind, args) VALUES ('{}', 'mixed', 'probe', '{{\"label\": \"stray\", \"sleep_ms\": 0}}')",
        db.schema(),
        uuid::Uuid::now_v7()
    ))
    .await?;
    let claimed = backend.job_claim(&claim(10)).await?;
    let labels: Vec<&str> = claimed
        .iter()
        .filter_map(|j| j.args["label"].as_str())
        .collect();
    assert_eq!(labels.len(), 2, "{labels:?}");
    assert!(
        labels.contains(&"stray") && labels.contains(&"grouped"),
        "{labels:?}"
    );
    let group: Option<String> = conn
        .query_one(
            &format!("SELECT group_key FROM {}.jobs WHERE id = $1", db.schema()),
            &[&early],
        )
        .await?
        .get(0);
    assert_eq!(group.as_deref(), Some(""));
    Ok(())
}
