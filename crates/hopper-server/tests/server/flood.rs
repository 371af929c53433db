//! A peer that sends requests faster than the database answers takes at most its own
//! share of the requests in flight (128): past it, its requests get the transient "busy"
//! reply, while another peer's requests are still taken and answered.
//!
//! The flooder's `log` requests are held while the test holds a lock on the log table (the
//! log writer's first store waits, and every other request queues behind it, each holding
//! its place in flight); a heartbeat answered after them says they all reached the server.

use std::time::Duration;

use crate::common::*;
use ciborium::Value;
use hopper::JobId;
use hopper::testing::TestDatabase;

/// Requests in flight one peer may have (docs/protocol.md, §8).
const PER_PEER: usize = 128;

/// `log` requests the flooder sends at once: more than the server's bound (1,024), which
/// it would take whole without a bound of its own.
const FLOOD: usize = 1100;

/// A worker peer that said hello.
async fn worker(endpoint: &str, name: &str) -> RawPeer {
    let mut peer = RawPeer::connect(endpoint).await;
    let extra = vec![
        ("name", text(name)),
        ("queues", Value::Array(vec![text("elsewhere")])),
    ];
    let welcome = peer.hello("worker", TOKEN, extra).await;
    assert_eq!(text_of(&welcome, "type"), "welcome", "{welcome:?}");
    peer
}

/// Sends `count` `log` requests for `id` (numbered from `first`), then a heartbeat, and
/// returns the replies that came before its answer: those refused at once.
async fn flood(peer: &mut RawPeer, id: JobId, first: usize, count: usize) -> Vec<Value> {
    for req in first..first + count {
        peer.send(&log_request(req, id, "flood")).await;
    }
    peer.send(&map(vec![("type", text("heartbeat")), ("req", int(0))]))
        .await;
    let mut refused = Vec::new();
    loop {
        let reply = peer.recv().await;
        if text_of(&reply, "type") == "heartbeat_ack" {
            return refused;
        }
        refused.push(reply);
    }
}

/// The flooder's refused requests: all but its own share of the requests in flight, each
/// answered with the transient `internal` error a busy server answers.
fn assert_busy(replies: &[Value], share: usize) {
    assert_eq!(
        replies.len(),
        FLOOD - share,
        "the flooder holds its own share of the requests in flight, no more"
    );
    for r in replies {
        assert_eq!(text_of(r, "type"), "error", "{r:?}");
        assert_eq!(text_of(r, "code"), "internal", "{r:?}");
        assert_eq!(field(r, "transient"), Some(&Value::Bool(true)), "{r:?}");
    }
}

/// `count` replies, each an `ack`.
async fn assert_acked(peer: &mut RawPeer, count: usize) {
    for _ in 0..count {
        let reply = peer.recv().await;
        assert_eq!(text_of(&reply, "type"), "ack", "{reply:?}");
    }
}

/// A server on `db` with two jobs its node leased (as in an earlier run of it: no peer
/// holds them), a worker that floods it and another.
async fn scene(
    db: &TestDatabase,
) -> anyhow::Result<(hopper_server::ServerHandle, Vec<JobId>, RawPeer, RawPeer)> {
    let server = start(config(db, Duration::from_secs(30)).await).await;
    let jobs = leased_by(db, server.node_id(), 2).await?;
    let flooder = worker(server.endpoint(), "flooder").await;
    let other = worker(server.endpoint(), "other").await;
    Ok((server, jobs, flooder, other))
}

/// `peer` is still served: its `status` of `id` is answered at once.
async fn assert_served(peer: &mut RawPeer, id: JobId) {
    let status = map(vec![
        ("type", text("status")),
        ("req", int(1)),
        ("id", text(&id.to_string())),
    ]);
    peer.send(&status).await;
    let reply = peer.recv().await;
    assert_eq!(text_of(&reply, "type"), "job", "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flooding_peer_does_not_leave_the_others_busy() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (server, jobs, mut flooder, mut other) = scene(&db).await?;

    let lock = lock_table(&db, "job_logs", "SHARE").await?;
    let refused = flood(&mut flooder, jobs[0], 1, FLOOD).await;

    // The other peer is still served: a read at once, a log queued to be stored.
    assert_served(&mut other, jobs[1]).await;
    assert!(flood(&mut other, jobs[1], 2, 1).await.is_empty());

    assert_busy(&refused, PER_PEER);

    lock.batch_execute("COMMIT").await?;
    assert_acked(&mut other, 1).await;
    assert_acked(&mut flooder, PER_PEER).await;

    // Its requests answered, the flooder's share is free again.
    lock.batch_execute(&format!(
        "BEGIN; LOCK TABLE {}.job_logs IN SHARE MODE",
        db.schema()
    ))
    .await?;
    let refused = flood(&mut flooder, jobs[0], FLOOD + 1, PER_PEER).await;
    assert!(refused.is_empty(), "{refused:?}");
    lock.batch_execute("COMMIT").await?;
    assert_acked(&mut flooder, PER_PEER).await;
    server.shutdown().await;
    Ok(())
}

/// Heartbeats listing leases extend them one statement at a time per peer: a peer sending
/// them faster than the database answers has one running, the rest refused as busy, while
/// another peer's requests are still taken and answered. Unbounded, every heartbeat would
/// start a statement of its own, each waiting for a connection of the pool, which the
/// server's claims and outcomes would then wait behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_flooding_heartbeats_takes_its_share_only() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (server, jobs, mut flooder, mut other) = scene(&db).await?;

    // Extending leases notes the rows held elsewhere in held_leases: its statements wait.
    let lock = lock_table(&db, "held_leases", "SHARE").await?;
    for req in 1..=FLOOD {
        flooder
            .send(&heartbeat_of(i64::try_from(req)?, &jobs[..1]))
            .await;
    }
    // A heartbeat without leases is answered at once: what came before it was refused.
    let marker = FLOOD + 1;
    flooder
        .send(&map(vec![
            ("type", text("heartbeat")),
            ("req", int(i64::try_from(marker)?)),
        ]))
        .await;
    let mut refused = Vec::new();
    loop {
        let reply = flooder.recv().await;
        if field(&reply, "req") == Some(&int(i64::try_from(marker)?)) {
            break;
        }
        refused.push(reply);
    }

    // The other peer is still served.
    assert_served(&mut other, jobs[1]).await;

    assert_busy(&refused, 1);

    lock.batch_execute("COMMIT").await?;
    let reply = flooder.recv().await;
    assert_eq!(text_of(&reply, "type"), "heartbeat_ack", "{reply:?}");
    server.shutdown().await;
    Ok(())
}

/// A worker's heartbeat is not held back by its own requests: with its whole share of
/// requests in flight waiting on a lock (logs of 128 attempts), its heartbeat still
/// extends its leases at once, so they do not expire and its jobs are not run twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_does_not_wait_behind_its_peers_own_requests() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (server, jobs, mut worker, _other) = scene(&db).await?;

    let lock = lock_table(&db, "job_logs", "SHARE").await?;
    for req in 1..=PER_PEER {
        worker.send(&log_request(req, jobs[0], "stuck")).await;
    }
    worker
        .send(&heartbeat_of(i64::try_from(PER_PEER)? + 1, &jobs[..1]))
        .await;
    let reply = worker.recv().await;
    assert_eq!(text_of(&reply, "type"), "heartbeat_ack", "{reply:?}");
    assert_eq!(
        field(&reply, "lost")
            .and_then(Value::as_array)
            .map(Vec::len),
        Some(0),
        "{reply:?}"
    );

    lock.batch_execute("COMMIT").await?;
    assert_acked(&mut worker, PER_PEER).await;
    server.shutdown().await;
    Ok(())
}

/// Outcomes for leases no peer holds (jobs an earlier run of this server sent out, which
/// its workers report after the restart) take places among their peer's requests in flight
/// until they are written: a peer sending them faster than they are written is refused
/// past its own share, while another peer is still served. Unbounded, they would pile up
/// in the server's memory and ahead of every other worker's outcomes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_flooding_unheld_outcomes_takes_its_share_only() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let config = config(&db, Duration::from_secs(30)).await;
    let jobs = leased_by(&db, config.node_id, FLOOD).await?;
    let server = start(config).await;
    let mut flooder = worker(server.endpoint(), "flooder").await;
    let mut other = worker(server.endpoint(), "other").await;

    // The outcomes' writes wait.
    let lock = lock_table(&db, "jobs", "SHARE").await?;
    for (i, id) in jobs.iter().enumerate() {
        let req = i64::try_from(i)? + 1;
        flooder.send(&completed(req, &id.to_string(), 1)).await;
    }
    flooder
        .send(&map(vec![("type", text("heartbeat")), ("req", int(0))]))
        .await;
    let mut refused = Vec::new();
    loop {
        let reply = flooder.recv().await;
        if text_of(&reply, "type") == "heartbeat_ack" {
            break;
        }
        refused.push(reply);
    }

    assert_served(&mut other, jobs[0]).await;
    assert_busy(&refused, PER_PEER);

    lock.batch_execute("COMMIT").await?;
    flooder.set_timeout(Duration::from_secs(30));
    for _ in 0..PER_PEER {
        let reply = flooder.recv().await;
        assert_eq!(text_of(&reply, "type"), "ack", "{reply:?}");
        assert_eq!(text_of(&reply, "result"), "recorded", "{reply:?}");
    }
    server.shutdown().await;
    Ok(())
}
