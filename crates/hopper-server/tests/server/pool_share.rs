//! One peer whose requests wait on a lock does not take the server's whole pool: with a
//! pool of 4, a peer executes one request at a time (docs/protocol.md, §8), so another
//! peer's `status` is answered and a worker gets and finishes a job (a claim and an outcome
//! batch) while the stuck peer's `extend`s wait; once the lock goes, they are all answered,
//! in the order they were sent.
//!
//! The `extend`s wait on a row lock that the test holds on their job (`SELECT … FOR UPDATE`
//! in a transaction of its own), as they would behind a user's transaction.

use std::time::Duration;

use crate::common::*;
use ciborium::Value;
use hopper::testing::TestDatabase;
use hopper::{JobId, NewJob};

/// The server's pool.
const POOL: usize = 4;

/// The stuck peer's `extend`s: twice the pool, which they would all take without a bound.
const STUCK: i64 = 8;

/// A peer that said hello as `role`, its hello's other fields `extra`.
async fn peer(endpoint: &str, role: &str, extra: Vec<(&str, Value)>) -> RawPeer {
    let mut peer = RawPeer::connect(endpoint).await;
    let welcome = peer.hello(role, TOKEN, extra).await;
    assert_eq!(text_of(&welcome, "type"), "welcome", "{welcome:?}");
    peer
}

/// A `status` request for `id`.
fn status(req: i64, id: &str) -> Value {
    map(vec![
        ("type", text("status")),
        ("req", int(req)),
        ("id", text(id)),
    ])
}

/// Waits (10 s at most) until a connection of `app` waits on a lock.
async fn until_one_waits_on_a_lock(db: &TestDatabase, app: &str) -> anyhow::Result<()> {
    let client = sql(db).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let row = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE application_name = $1 AND wait_event_type = 'Lock'",
                &[&app],
            )
            .await?;
        if row.get::<_, i64>(0) > 0 {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "no request waits on the lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_stuck_on_a_lock_leaves_the_pool_to_the_others() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let app = format!("pool_{}", db.schema());
    let mut config = config(&db, Duration::from_secs(30)).await;
    config.backend = server_backend(&db, &app, POOL).await;
    config.pool_size = POOL;
    let server = start(config).await;
    let endpoint = server.endpoint();
    let locked: JobId = attempts(&db, 1).await?[0];
    let queues = ("queues", Value::Array(vec![text("elsewhere")]));
    let mut stuck = peer(endpoint, "worker", vec![queues]).await;
    let mut reader = peer(endpoint, "client", vec![]).await;
    let kinds = ("kinds", Value::Array(vec![text("quick")]));
    let mut worker = peer(endpoint, "worker", vec![kinds, ("concurrency", int(1))]).await;

    let lock = sql(&db).await?;
    lock.batch_execute(&format!(
        "BEGIN; SELECT 1 FROM {}.jobs WHERE id = '{locked}' FOR UPDATE",
        db.schema()
    ))
    .await?;
    for req in 1..=STUCK {
        let extend = map(vec![
            ("type", text("extend")),
            ("req", int(req)),
            ("id", text(&locked.to_string())),
            ("attempt", int(1)),
            ("by_ms", int(60_000)),
        ]);
        stuck.send(&extend).await;
    }
    // Answered after the `extend`s reached the server, before any of them.
    stuck
        .send(&map(vec![("type", text("heartbeat")), ("req", int(0))]))
        .await;
    let reply = stuck.recv().await;
    assert_eq!(text_of(&reply, "type"), "heartbeat_ack", "{reply:?}");
    until_one_waits_on_a_lock(&db, &app).await?;

    // Another peer's read is answered, and a worker gets and finishes a job.
    reader.send(&status(1, &locked.to_string())).await;
    let reply = reader.recv().await;
    assert_eq!(text_of(&reply, "type"), "job", "{reply:?}");
    db.backend()
        .job_insert(&NewJob::new("quick", serde_json::json!({})))
        .await?;
    let (id, attempt) = order(&mut worker).await;
    let completed = map(vec![
        ("type", text("completed")),
        ("req", int(2)),
        ("id", text(&id)),
        ("attempt", int(attempt)),
    ]);
    worker.send(&completed).await;
    let reply = worker.recv_type("ack").await;
    assert_eq!(text_of(&reply, "result"), "recorded", "{reply:?}");
    reader.send(&status(3, &id)).await;
    let reply = reader.recv().await;
    let job = field(&reply, "job").cloned().unwrap_or(Value::Null);
    assert_eq!(text_of(&job, "state"), "completed", "{reply:?}");

    // The lock gone, the stuck peer's requests are all answered, in order.
    lock.batch_execute("COMMIT").await?;
    for req in 1..=STUCK {
        let reply = stuck.recv().await;
        assert_eq!(text_of(&reply, "type"), "ack", "{reply:?}");
        assert_eq!(field(&reply, "req"), Some(&int(req)), "{reply:?}");
        assert_eq!(text_of(&reply, "result"), "recorded", "{reply:?}");
    }
    server.shutdown().await;
    Ok(())
}
