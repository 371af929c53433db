//! A thousand connected idle workers on one server, which uses at most ten database
//! connections (its pool and its one LISTEN), and still places a job on one of them; and
//! idle workers taking turns at the jobs.

use std::time::Duration;

use crate::common::*;
use hopper::testing::TestDatabase;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_idle_workers_share_a_few_connections() -> anyhow::Result<()> {
    const WORKERS: usize = 1000;
    let db = TestDatabase::new().await?;
    let app = format!("srv_{}", db.schema());
    let server = start(config(&db, Duration::from_secs(30)).await).await;
    let endpoint = server.endpoint().to_owned();

    let mut joins = Vec::new();
    for i in 0..WORKERS {
        let endpoint = endpoint.clone();
        joins.push(tokio::spawn(async move {
            let mut peer = RawPeer::connect(&endpoint).await;
            let welcome = peer
                .hello(
                    "worker",
                    TOKEN,
                    vec![
                        ("name", text(&format!("idle-{i}"))),
                        ("queues", ciborium::Value::Array(vec![text("idle")])),
                        ("concurrency", int(1)),
                    ],
                )
                .await;
            assert_eq!(text_of(&welcome, "type"), "welcome", "{welcome:?}");
            peer
        }));
    }
    let mut peers = Vec::with_capacity(WORKERS);
    for j in joins {
        peers.push(j.await?);
    }

    // One job for the thousand: exactly one of them gets the order.
    let client = hopper::Client::new(hopper::connect(&url(&endpoint), Default::default()).await?);
    let id = client
        .insert(hopper::NewJob::new("noop", serde_json::json!({})).with_queue("idle"))
        .await?;
    // Each peer's socket is looked at without waiting (a thousand blocking receives would
    // take a thread each), every 10 ms for 5 s, then once more for a second order.
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while got.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
        got.extend(peers.iter_mut().filter_map(order_now));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    got.extend(peers.iter_mut().filter_map(order_now));
    assert_eq!(got.len(), 1, "exactly one worker gets the one job");
    let job = field(&got[0], "job").expect("a job");
    assert_eq!(text_of(job, "id"), id.to_string());

    let used = connections(&db, &app).await;
    println!("{WORKERS} idle workers connected; the server uses {used} database connections");
    assert!((1..=10).contains(&used), "{used} connections");
    server.shutdown().await;
    Ok(())
}

/// Idle workers of equal credit take turns: each job, submitted once the one before it is
/// completed, goes to the worker whose last order is the oldest, so none is left idle while
/// another gets every job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_workers_take_turns() -> anyhow::Result<()> {
    const WORKERS: usize = 3;
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(30)).await).await;
    let endpoint = server.endpoint().to_owned();
    let mut peers = Vec::new();
    for i in 0..WORKERS {
        let mut peer = RawPeer::connect(&endpoint).await;
        let extra = vec![
            ("name", text(&format!("turn-{i}"))),
            ("queues", ciborium::Value::Array(vec![text("turns")])),
            ("concurrency", int(1)),
        ];
        let welcome = peer.hello("worker", TOKEN, extra).await;
        assert_eq!(text_of(&welcome, "type"), "welcome", "{welcome:?}");
        peers.push(peer);
    }
    let client = hopper::Client::new(hopper::connect(&url(&endpoint), Default::default()).await?);
    let mut takers = Vec::new();
    for round in 0..2 * WORKERS {
        let id = client
            .insert(hopper::NewJob::new("noop", serde_json::json!({})).with_queue("turns"))
            .await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let (who, order) = loop {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no worker got job {round}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
            if let Some(found) = peers
                .iter_mut()
                .enumerate()
                .find_map(|(i, p)| order_now(p).map(|o| (i, o)))
            {
                break found;
            }
        };
        let job = field(&order, "job").expect("a job");
        assert_eq!(text_of(job, "id"), id.to_string());
        let attempt = field(job, "attempt").cloned().unwrap_or(int(1));
        let completed = map(vec![
            ("type", text("completed")),
            ("req", int(10 + i64::try_from(round)?)),
            ("id", text(&id.to_string())),
            ("attempt", attempt),
            ("duration_ms", int(0)),
        ]);
        peers[who].send(&completed).await;
        peers[who].recv_type("ack").await;
        takers.push(who);
    }
    let mut first: Vec<usize> = takers[..WORKERS].to_vec();
    first.sort_unstable();
    assert_eq!(
        first,
        [0, 1, 2],
        "each idle worker gets one of the first jobs: {takers:?}"
    );
    assert_eq!(
        takers[WORKERS..],
        takers[..WORKERS],
        "then the same turns: {takers:?}"
    );
    server.shutdown().await;
    Ok(())
}

/// An `order` the peer has received, if any (other messages are dropped).
fn order_now(peer: &mut RawPeer) -> Option<ciborium::Value> {
    while let Some(frame) = peer.try_recv_now() {
        let value: ciborium::Value = ciborium::from_reader(&frame[..]).ok()?;
        if text_of(&value, "type") == "order" {
            return Some(value);
        }
    }
    None
}
