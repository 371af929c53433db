//! A worker whose connection closes while messages it sent still wait in the server, behind
//! another peer's slow frames: its session lasts until they have had their turns, so its
//! outcome counts (its order is recorded, not retried as a vanished worker's). Its other
//! requests are dropped unread if the server has learnt of the close by their turn; when
//! it learns of it depends on libzmq's monitor and the machine, so how many are dropped is
//! not asserted. Its outcomes for leases no peer holds, whose lookup still waits its turn
//! when its session ends, count too.

use std::time::Duration;

use crate::common::*;
use crate::fairness::largest_heartbeat;
use ciborium::Value;
use hopper::JobState;
use hopper::backend::JobGetParams;
use hopper::testing::TestDatabase;
use uuid::Uuid;

/// The `submit`s the closing worker sends before its outcome (requests whose answer
/// nobody is left to read).
const SUBMITS: usize = 40;

/// The flooder's largest heartbeats: they keep the server's loop busy (about 0.3 s each in
/// a debug build) while staying under a peer's 8 MiB read ahead, so that the closing
/// worker's messages are read into the server at once behind them.
const SLOW_FRAMES: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_closed_workers_waiting_frames_take_their_turns() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(30)).await).await;
    let endpoint = server.endpoint().to_owned();

    let mut leaving = RawPeer::connect(&endpoint).await;
    let extra = vec![("queues", Value::Array(vec![text("gone")]))];
    let r = leaving.hello("worker", TOKEN, extra).await;
    assert_eq!(text_of(&r, "type"), "welcome", "{r:?}");
    let job = hopper::NewJob::new("last", serde_json::json!({})).with_queue("gone");
    db.backend().job_insert(&job).await?;
    let (id, attempt) = order(&mut leaving).await;
    assert_eq!(id, job.id.to_string());

    let mut flooder = RawPeer::connect(&endpoint).await;
    let extra = vec![("queues", Value::Array(vec![text("elsewhere")]))];
    let r = flooder.hello("worker", TOKEN, extra).await;
    assert_eq!(text_of(&r, "type"), "welcome", "{r:?}");
    let frame = largest_heartbeat()?;
    assert!(frame.len() * SLOW_FRAMES < 8 << 20, "{}", frame.len());
    for _ in 0..SLOW_FRAMES {
        flooder.send_bytes(frame.clone()).await;
    }

    for n in 0..SUBMITS {
        let job = map(vec![("kind", text("late")), ("queue", text("dropped"))]);
        let req = i64::try_from(n)? + 10;
        leaving
            .send(&map(vec![
                ("type", text("submit")),
                ("req", int(req)),
                ("job", job),
            ]))
            .await;
    }
    leaving.send(&completed(2, &id, attempt)).await;
    leaving.close_after_sending(Duration::from_secs(10));

    flooder.set_timeout(Duration::from_secs(60));
    // Answered, or refused as busy while the first one's leases are looked up.
    for _ in 0..SLOW_FRAMES {
        let r = flooder.recv().await;
        let ty = text_of(&r, "type");
        assert!(ty == "heartbeat_ack" || ty == "error", "{r:?}");
    }
    // The outcome counted: recorded, not failed as the order of a worker that vanished.
    let backend = db.backend();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let stored = loop {
        let stored = backend
            .job_get(&JobGetParams { id: job.id })
            .await?
            .ok_or_else(|| anyhow::anyhow!("job gone"))?;
        if stored.state != JobState::Running || tokio::time::Instant::now() > deadline {
            break stored;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(stored.state, JobState::Completed, "{stored:?}");
    assert!(stored.errors.is_empty(), "{:?}", stored.errors);

    server.shutdown().await;
    Ok(())
}

/// Outcomes for leases no peer holds (a restarted server's orders) are looked up before
/// they are taken, each message's lookup in its turn among its peer's requests. A worker
/// whose session ends while such a lookup waits its turn has its waiting requests dropped,
/// but not that lookup: its outcomes count as those of the orders it held do. The lookups
/// are held by a lock on the jobs table: two execute (a peer's share of the pool of 8) and
/// wait on it, the third waits its turn until the worker is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_workers_outcomes_waiting_for_their_lookup_count() -> anyhow::Result<()> {
    logs();
    let db = TestDatabase::new().await?;
    let config = config(&db, Duration::from_secs(30)).await;
    let jobs = leased_by(&db, config.node_id, 3).await?;
    let server = start(config).await;
    let name = format!("vanishing-{}", Uuid::now_v7().simple());
    let mut leaving = RawPeer::connect(server.endpoint()).await;
    let extra = vec![("name", text(&name)), ("concurrency", int(0))];
    let r = leaving.hello("worker", TOKEN, extra).await;
    assert_eq!(text_of(&r, "type"), "welcome", "{r:?}");

    let lock = lock_table(&db, "jobs", "ACCESS EXCLUSIVE").await?;
    for (req, id) in (2..).zip(&jobs) {
        leaving.send(&completed(req, &id.to_string(), 1)).await;
    }
    // Answered at once, after the outcomes reached the server.
    leaving
        .send(&map(vec![("type", text("heartbeat")), ("req", int(1))]))
        .await;
    leaving.recv_type("heartbeat_ack").await;
    until_lock_waits(&db, &server_app(&db), "%job_leases_of_node%", 2).await?;
    leaving.close_after_sending(Duration::from_secs(10));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !lines_with(&name)
        .iter()
        .any(|l| l.contains("connection closed"))
    {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the server never dropped the closed worker"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    lock.batch_execute("COMMIT").await?;

    let backend = db.backend();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    for id in jobs {
        let stored = loop {
            let stored = backend
                .job_get(&JobGetParams { id })
                .await?
                .ok_or_else(|| anyhow::anyhow!("job gone"))?;
            if stored.state != JobState::Running || tokio::time::Instant::now() > deadline {
                break stored;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(stored.state, JobState::Completed, "{stored:?}");
    }
    server.shutdown().await;
    Ok(())
}
