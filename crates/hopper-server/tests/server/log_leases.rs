//! The attempts a worker may log for besides those it holds: its last lines of an attempt
//! may come after the attempt's outcome (the Python and Node workers send them once the
//! attempt's request in flight is answered), so an attempt it finished lately still takes
//! its lines, also once another worker runs the job's next attempt, which is not the first
//! worker's to log for. Lines resent on a new connection (a reconnect) or to a restarted
//! server land too, for the latest attempt of a job that ran under the server's node.

use std::time::Duration;

use crate::common::*;
use ciborium::Value;
use hopper::NewJob;
use hopper::testing::TestDatabase;

/// A worker of the kind `late`, with room for one order.
async fn worker(endpoint: &str, name: &str) -> RawPeer {
    let mut peer = RawPeer::connect(endpoint).await;
    let extra = vec![
        ("name", text(name)),
        ("kinds", Value::Array(vec![text("late")])),
        ("concurrency", int(1)),
    ];
    let r = peer.hello("worker", TOKEN, extra).await;
    assert_eq!(text_of(&r, "type"), "welcome", "{r:?}");
    peer
}

/// Sends `request` and returns the `result` of its `ack`.
async fn ack_of(peer: &mut RawPeer, request: &Value) -> String {
    peer.send(request).await;
    let r = peer.recv_type("ack").await;
    assert_eq!(field(&r, "req"), field(request, "req"), "{r:?}");
    text_of(&r, "result").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_lines_after_its_outcome_still_land() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(30)).await).await;
    let mut first = worker(server.endpoint(), "first").await;
    let job = NewJob::new("late", serde_json::json!({})).with_max_attempts(3);
    db.backend().job_insert(&job).await?;
    let (id, attempt) = order(&mut first).await;
    assert_eq!((id.as_str(), attempt), (job.id.to_string().as_str(), 1));

    // It leaves (no order more for it), then fails its attempt, retried at once elsewhere.
    let bye = map(vec![("type", text("bye")), ("req", int(2))]);
    assert_eq!(ack_of(&mut first, &bye).await, "recorded");
    let failed = map(vec![
        ("type", text("failed")),
        ("req", int(3)),
        ("id", text(&id)),
        ("attempt", int(1)),
        ("error", text("flaky")),
        ("retry_in_ms", int(0)),
    ]);
    assert_eq!(ack_of(&mut first, &failed).await, "recorded");
    let mut second = worker(server.endpoint(), "second").await;
    let (_, attempt) = order(&mut second).await;
    assert_eq!(attempt, 2);

    // The first worker's last lines of its attempt land; the second's attempt is not its.
    let late = log_request_of(4, job.id, 1, "first's last line");
    assert_eq!(ack_of(&mut first, &late).await, "recorded");
    let not_its = log_request_of(5, job.id, 2, "not its attempt");
    assert_eq!(ack_of(&mut first, &not_its).await, "lease_lost");

    // The second completes the job, then sends its last lines: no peer holds the job, and
    // it no longer runs, but the attempt was the second's.
    assert_eq!(ack_of(&mut second, &completed(2, &id, 2)).await, "recorded");
    let late = log_request_of(3, job.id, 2, "second's last line");
    assert_eq!(ack_of(&mut second, &late).await, "recorded");

    let lines = |s: &str| vec![s.to_owned()];
    assert_eq!(
        stored_lines(&db, job.id).await?,
        [
            (1, lines("first's last line")),
            (2, lines("second's last line"))
        ]
    );
    server.shutdown().await;
    Ok(())
}

/// A `failed` request for attempt 1 of `id`, retried in an hour.
fn failed_for_later(req: i64, id: &str) -> Value {
    map(vec![
        ("type", text("failed")),
        ("req", int(req)),
        ("id", text(id)),
        ("attempt", int(1)),
        ("error", text("flaky")),
        ("retry_in_ms", int(3_600_000)),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_lines_resent_after_a_reconnect_still_land() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(30)).await).await;
    let mut before = worker(server.endpoint(), "before-reconnect").await;
    let waiting = NewJob::new("late", serde_json::json!({})).with_max_attempts(3);
    db.backend().job_insert(&waiting).await?;
    let (id, _) = order(&mut before).await;
    assert_eq!(
        ack_of(&mut before, &failed_for_later(2, &id)).await,
        "recorded"
    );
    let done = NewJob::new("late", serde_json::json!({}));
    db.backend().job_insert(&done).await?;
    let (id, _) = order(&mut before).await;
    assert_eq!(ack_of(&mut before, &completed(3, &id, 1)).await, "recorded");

    // Its connection is replaced (a new peer): the lines it had not seen acknowledged are
    // sent again, for an attempt waiting for its retry and a completed one.
    drop(before);
    let mut after = worker(server.endpoint(), "after-reconnect").await;
    let resent = log_request_of(4, waiting.id, 1, "before the retry");
    assert_eq!(ack_of(&mut after, &resent).await, "recorded");
    let resent = log_request_of(5, done.id, 1, "after the outcome");
    assert_eq!(ack_of(&mut after, &resent).await, "recorded");
    // An attempt that was never made is no one's.
    let unmade = log_request_of(6, done.id, 2, "no such attempt");
    assert_eq!(ack_of(&mut after, &unmade).await, "lease_lost");

    let lines = |s: &str| vec![(1, vec![s.to_owned()])];
    assert_eq!(
        stored_lines(&db, waiting.id).await?,
        lines("before the retry")
    );
    assert_eq!(
        stored_lines(&db, done.id).await?,
        lines("after the outcome")
    );
    server.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_lines_resent_after_a_restart_of_its_server_still_land() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let first = config(&db, Duration::from_secs(30)).await;
    let node = first.node_id;
    let server = start(first).await;
    let mut before = worker(server.endpoint(), "before-restart").await;
    let job = NewJob::new("late", serde_json::json!({}));
    db.backend().job_insert(&job).await?;
    let (id, _) = order(&mut before).await;
    assert_eq!(ack_of(&mut before, &completed(2, &id, 1)).await, "recorded");
    drop(before);
    server.shutdown().await;

    // The same node restarted: a new server, which has never seen the worker.
    let mut again = config(&db, Duration::from_secs(30)).await;
    again.node_id = node;
    let server = start(again).await;
    let mut after = worker(server.endpoint(), "after-restart").await;
    let resent = log_request_of(3, job.id, 1, "after the restart");
    assert_eq!(ack_of(&mut after, &resent).await, "recorded");
    assert_eq!(
        stored_lines(&db, job.id).await?,
        [(1, vec!["after the restart".to_owned()])]
    );
    server.shutdown().await;
    Ok(())
}
