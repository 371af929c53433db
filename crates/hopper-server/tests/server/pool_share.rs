//! One peer whose requests wait on a lock does not take the server's whole pool: with a
//! pool of 4, a peer executes one request at a time (docs/protocol.md, §8), so another
//! peer's `status` is answered and a worker gets and finishes a job (a claim and an outcome
//! batch) while the stuck peer's `cancel`s wait; once the lock goes, they are all answered,
//! in the order they were sent.
//!
//! And a crowd of such peers, one per connection of the pool, still leaves the server's
//! claims and outcomes the connection kept back for them: peers' requests together execute
//! on three of the four. And a peer whose session ends has its requests still waiting in
//! its line dropped, not run.
//!
//! The `cancel`s wait on a row lock that the test holds on their job (`SELECT … FOR UPDATE`
//! in a transaction of its own), as they would behind a user's transaction. (Not lease
//! extensions: those skip a held row rather than wait on it.)

use std::time::Duration;

use crate::common::*;
use ciborium::Value;
use hopper::testing::TestDatabase;
use hopper::{JobId, NewJob};
use hopper_server::ServerHandle;

/// The server's pool.
const POOL: usize = 4;

/// The stuck peer's `cancel`s: twice the pool, which they would all take without a bound.
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

/// A `cancel` of `id`.
fn cancel(req: i64, id: JobId) -> Value {
    map(vec![
        ("type", text("cancel")),
        ("req", int(req)),
        ("id", text(&id.to_string())),
    ])
}

/// `reply` answers request `req`: the cancelled job if `first`, else the conflict of a job
/// already cancelled.
fn assert_cancelled(reply: &Value, req: i64, first: bool) {
    assert_eq!(field(reply, "req"), Some(&int(req)), "{reply:?}");
    if first {
        assert_eq!(text_of(reply, "type"), "job", "{reply:?}");
    } else {
        assert_eq!(text_of(reply, "type"), "error", "{reply:?}");
        assert_eq!(text_of(reply, "code"), "conflict", "{reply:?}");
    }
}

/// Sends a `heartbeat` and waits for its answer: every request sent before it has reached
/// the server.
async fn all_received(peer: &mut RawPeer) {
    peer.send(&map(vec![("type", text("heartbeat")), ("req", int(0))]))
        .await;
    let reply = peer.recv().await;
    assert_eq!(text_of(&reply, "type"), "heartbeat_ack", "{reply:?}");
}

/// A worker peer gets a new `quick` job and completes it: a claim and an outcome batch of
/// the server's.
async fn a_job_runs(db: &TestDatabase, worker: &mut RawPeer, req: i64) -> anyhow::Result<String> {
    db.backend()
        .job_insert(&NewJob::new("quick", serde_json::json!({})))
        .await?;
    let (id, attempt) = order(worker).await;
    let completed = map(vec![
        ("type", text("completed")),
        ("req", int(req)),
        ("id", text(&id)),
        ("attempt", int(attempt)),
    ]);
    worker.send(&completed).await;
    let reply = worker.recv_type("ack").await;
    assert_eq!(text_of(&reply, "result"), "recorded", "{reply:?}");
    Ok(id)
}

/// A server with a pool of `pool` connections named `app`, and two running jobs held by no
/// peer, the first of which `lock` holds locked in an open transaction:
/// `(db, app, server, [locked job, other job], lock)`.
async fn stuck_setup(
    pool: usize,
) -> anyhow::Result<(
    TestDatabase,
    String,
    ServerHandle,
    [JobId; 2],
    tokio_postgres::Client,
)> {
    let db = TestDatabase::new().await?;
    let app = format!("pool_{}", db.schema());
    let mut config = config(&db, Duration::from_secs(30)).await;
    config.backend = server_backend(&db, &app, pool).await;
    config.pool_size = pool;
    let server = start(config).await;
    let jobs = attempts(&db, 2).await?;
    let (locked, other) = (jobs[0], jobs[1]);
    let lock = sql(&db).await?;
    lock.batch_execute(&format!(
        "BEGIN; SELECT 1 FROM {}.jobs WHERE id = '{locked}' FOR UPDATE",
        db.schema()
    ))
    .await?;
    Ok((db, app, server, [locked, other], lock))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_stuck_on_a_lock_leaves_the_pool_to_the_others() -> anyhow::Result<()> {
    let (db, app, server, [locked, _], lock) = stuck_setup(POOL).await?;
    let endpoint = server.endpoint();
    let queues = ("queues", Value::Array(vec![text("elsewhere")]));
    let mut stuck = peer(endpoint, "worker", vec![queues]).await;
    let mut reader = peer(endpoint, "client", vec![]).await;
    let kinds = ("kinds", Value::Array(vec![text("quick")]));
    let mut worker = peer(endpoint, "worker", vec![kinds, ("concurrency", int(1))]).await;

    for req in 1..=STUCK {
        stuck.send(&cancel(req, locked)).await;
    }
    // Answered after the `cancel`s reached the server, before any of them.
    all_received(&mut stuck).await;
    until_lock_waits(&db, &app, "%", 1).await?;

    // Another peer's read is answered, and a worker gets and finishes a job.
    reader.send(&status(1, &locked.to_string())).await;
    let reply = reader.recv().await;
    assert_eq!(text_of(&reply, "type"), "job", "{reply:?}");
    let id = a_job_runs(&db, &mut worker, 2).await?;
    reader.send(&status(3, &id)).await;
    let reply = reader.recv().await;
    let job = field(&reply, "job").cloned().unwrap_or(Value::Null);
    assert_eq!(text_of(&job, "state"), "completed", "{reply:?}");

    // The lock gone, the stuck peer's requests are all answered, in order.
    lock.batch_execute("COMMIT").await?;
    for req in 1..=STUCK {
        let reply = stuck.recv().await;
        assert_cancelled(&reply, req, req == 1);
    }
    server.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_of_stuck_peers_leaves_the_claims_their_connection() -> anyhow::Result<()> {
    let (db, app, server, [locked, _], lock) = stuck_setup(POOL).await?;
    let endpoint = server.endpoint();
    let kinds = ("kinds", Value::Array(vec![text("quick")]));
    let mut worker = peer(endpoint, "worker", vec![kinds, ("concurrency", int(1))]).await;
    let mut crowd = Vec::new();
    for _ in 0..POOL {
        let queues = ("queues", Value::Array(vec![text("elsewhere")]));
        crowd.push(peer(endpoint, "worker", vec![queues]).await);
    }

    // One `cancel` each: each peer's line lets it execute, so only the bound on all peers
    // together keeps the last one from taking the last connection.
    for stuck in crowd.iter_mut() {
        stuck.send(&cancel(1, locked)).await;
        all_received(stuck).await;
    }
    until_lock_waits(&db, &app, "%", 3).await?;

    a_job_runs(&db, &mut worker, 1).await?;
    assert_eq!(
        lock_waits(&db, &app, "%").await?,
        3,
        "the peers' requests execute on three connections of four"
    );

    lock.batch_execute("COMMIT").await?;
    let mut cancelled = 0;
    for stuck in crowd.iter_mut() {
        let reply = stuck.recv().await;
        let first = text_of(&reply, "type") == "job";
        cancelled += usize::from(first);
        assert_cancelled(&reply, 1, first);
    }
    assert_eq!(cancelled, 1, "one cancel did it, the others found it done");
    server.shutdown().await;
    Ok(())
}

/// Waits (10 s at most) until job `id` holds an error mentioning `what`.
async fn until_error(db: &TestDatabase, id: &str, what: &str) -> anyhow::Result<()> {
    let client = sql(db).await?;
    let query = format!(
        "SELECT errors::text FROM {}.jobs WHERE id::text = $1",
        db.schema()
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let errors: String = client.query_one(&query, &[&id]).await?.get(0);
        if errors.contains(what) {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "job {id} has no error mentioning {what:?}: {errors}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A peer whose session ends has its requests still waiting in its line dropped, not run.
/// With a pool of 2, peers' requests execute one at a time, in the order they reach the
/// connection: the gone peer's `cancel` of the locked job executes, its `cancel` of the
/// other job waits in its line, and another peer's `status` waits for the connection.
/// Once the gone peer's held order comes back failed ("connection closed": its session
/// ended) the lock goes; had the waiting `cancel` been kept, it would take the connection
/// after that `status` and before the next one, and cancel the other job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gone_peer_has_its_waiting_requests_dropped() -> anyhow::Result<()> {
    let (db, app, server, [locked, other], lock) = stuck_setup(2).await?;
    let endpoint = server.endpoint();
    let kinds = ("kinds", Value::Array(vec![text("held")]));
    let mut gone = peer(endpoint, "worker", vec![kinds, ("concurrency", int(1))]).await;
    let mut reader = peer(endpoint, "client", vec![]).await;
    db.backend()
        .job_insert(&NewJob::new("held", serde_json::json!({})))
        .await?;
    let (held, _) = order(&mut gone).await;
    gone.send(&cancel(1, locked)).await;
    gone.send(&cancel(2, other)).await;
    all_received(&mut gone).await;
    until_lock_waits(&db, &app, "%", 1).await?;
    reader.send(&status(1, &other.to_string())).await;
    drop(gone);
    until_error(&db, &held, "connection closed").await?;

    lock.batch_execute("COMMIT").await?;
    let reply = reader.recv().await;
    assert_eq!(text_of(&reply, "type"), "job", "{reply:?}");
    reader.send(&status(2, &other.to_string())).await;
    let reply = reader.recv().await;
    let job = field(&reply, "job").cloned().unwrap_or(Value::Null);
    assert_eq!(
        text_of(&job, "state"),
        "running",
        "the gone peer's waiting cancel was not run: {reply:?}"
    );
    server.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_pool_answers_a_cancel_of_a_held_job_after_its_bound() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let mut config = config(&db, Duration::from_secs(30)).await;
    let options = hopper::PgOptions::default()
        .with_schema(db.schema())
        .with_pool_size(2)
        .with_lock_timeout(Duration::from_millis(500));
    config.admin = Some(std::sync::Arc::new(
        hopper::PgBackend::connect(db.url(), options).await?,
    ));
    let server = start(config).await;
    let new = NewJob::new("held", serde_json::json!({}));
    let job = new.id;
    db.backend().job_insert(&new).await?;
    let hold = db.hold_job(job).await?;
    let mut client = peer(server.endpoint(), "client", vec![]).await;
    client.send(&cancel(1, job)).await;
    // Within the receive timeout (10 s): the admin pool's bound, not the holder's time.
    let reply = client.recv().await;
    assert_eq!(text_of(&reply, "type"), "error", "{reply:?}");
    assert_eq!(text_of(&reply, "code"), "internal", "{reply:?}");
    assert_eq!(
        field(&reply, "transient"),
        Some(&Value::Bool(true)),
        "{reply:?}"
    );
    assert!(
        text_of(&reply, "message").contains("lock timeout"),
        "{reply:?}"
    );
    hold.release().await?;
    client.send(&cancel(2, job)).await;
    assert_cancelled(&client.recv().await, 2, true);
    server.shutdown().await;
    Ok(())
}
