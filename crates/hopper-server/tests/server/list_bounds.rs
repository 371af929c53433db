//! Each list a peer sends is bounded (`docs/protocol.md`, §3): one item past the bound
//! refuses the message as `invalid`, naming the field and the limit, and nothing of it is
//! done; the peer keeps its session, and a message at the bound is taken whole.

use std::time::Duration;

use crate::common::*;
use ciborium::Value;
use hopper::JobState;
use hopper::backend::JobGetParams;
use hopper::testing::TestDatabase;
use hopper_protocol::{MAX_BATCH_JOBS, MAX_HEARTBEAT_LEASES, MAX_LOG_LINES, MAX_OUTCOMES};

/// `n` items made by `item`, the first `first` if given.
fn items(n: usize, first: Option<Value>, item: impl Fn() -> Value) -> Value {
    Value::Array(
        first
            .into_iter()
            .chain((0..n).map(|_| item()))
            .take(n)
            .collect(),
    )
}

/// A lease of a job nobody holds.
fn made_up(extra: Vec<(&str, Value)>) -> Value {
    let mut entries = vec![
        ("id", text(&uuid::Uuid::now_v7().to_string())),
        ("attempt", int(1)),
    ];
    entries.extend(extra);
    map(entries)
}

/// Sends `request` and expects `invalid` for its list `name` of `count` items.
async fn assert_refused(peer: &mut RawPeer, request: Value, name: &str, count: usize, most: usize) {
    peer.send(&request).await;
    let r = peer.recv().await;
    let (ty, code, message) = (
        text_of(&r, "type"),
        text_of(&r, "code"),
        text_of(&r, "message"),
    );
    assert_eq!((ty, code), ("error", "invalid"), "{name}: {message}");
    assert_eq!(field(&r, "req"), Some(&int(9)), "{message}");
    assert!(
        message.ends_with(&format!(
            "{name}: {count} items, over the limit of {most} in one message"
        )),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_past_their_bounds_are_refused_and_change_nothing() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let backend = db.backend();
    let mut worker = RawPeer::connect(server.endpoint()).await;
    let extra = vec![("queues", Value::Array(vec![text("bounds")]))];
    let r = worker.hello("worker", TOKEN, extra).await;
    assert_eq!(text_of(&r, "type"), "welcome", "{r:?}");
    let job = hopper::NewJob::new("bounded", serde_json::json!({})).with_queue("bounds");
    backend.job_insert(&job).await?;
    let (id, attempt) = order(&mut worker).await;
    assert_eq!(id, job.id.to_string());
    let lease = || map(vec![("id", text(&id)), ("attempt", int(attempt))]);
    let read = || async {
        backend
            .job_get(&JobGetParams { id: job.id })
            .await
            .map(|j| j.expect("the job"))
    };
    let before = read().await?;

    let completed = map(vec![
        ("outcome", text("completed")),
        ("id", text(&id)),
        ("attempt", int(attempt)),
    ]);
    let outcomes = |n: usize| {
        map(vec![
            ("type", text("outcomes")),
            ("req", int(9)),
            (
                "outcomes",
                items(n, Some(completed.clone()), || {
                    made_up(vec![("outcome", text("released"))])
                }),
            ),
        ])
    };
    assert_refused(
        &mut worker,
        outcomes(MAX_OUTCOMES + 1),
        "outcomes",
        MAX_OUTCOMES + 1,
        MAX_OUTCOMES,
    )
    .await;

    let heartbeat = map(vec![
        ("type", text("heartbeat")),
        ("req", int(9)),
        (
            "leases",
            items(MAX_HEARTBEAT_LEASES + 1, Some(lease()), || made_up(vec![])),
        ),
    ]);
    let over = MAX_HEARTBEAT_LEASES + 1;
    assert_refused(&mut worker, heartbeat, "leases", over, MAX_HEARTBEAT_LEASES).await;

    let job_spec = || map(vec![("kind", text("batched")), ("queue", text("batched"))]);
    let batch = map(vec![
        ("type", text("submit_batch")),
        ("req", int(9)),
        ("jobs", items(MAX_BATCH_JOBS + 1, None, job_spec)),
    ]);
    assert_refused(
        &mut worker,
        batch,
        "jobs",
        MAX_BATCH_JOBS + 1,
        MAX_BATCH_JOBS,
    )
    .await;

    let line = || map(vec![("level", text("info")), ("message", text("l"))]);
    let log = map(vec![
        ("type", text("log")),
        ("req", int(9)),
        ("id", text(&id)),
        ("attempt", int(attempt)),
        ("lines", items(MAX_LOG_LINES + 1, None, line)),
    ]);
    assert_refused(&mut worker, log, "lines", MAX_LOG_LINES + 1, MAX_LOG_LINES).await;

    // Nothing was done: the job still runs under the same lease, not extended; no job was
    // inserted, no line stored.
    let after = read().await?;
    assert_eq!(after.state, JobState::Running);
    assert_eq!(after.lease_expires_at, before.lease_expires_at);
    assert_eq!(db.queue_stats("batched").await?.available, 0);
    let logs = backend
        .logs()
        .expect("a log store")
        .job_logs(job.id)
        .await?;
    assert!(logs.is_empty(), "{logs:?}");

    // The session goes on, and a message at the bound is taken whole.
    worker
        .send(&map(vec![
            ("type", text("heartbeat")),
            ("req", int(10)),
            ("leases", Value::Array(vec![lease()])),
        ]))
        .await;
    let r = worker.recv_type("heartbeat_ack").await;
    assert_eq!(field(&r, "lost"), Some(&Value::Array(vec![])), "{r:?}");
    let mut at_most = outcomes(MAX_OUTCOMES);
    if let Value::Map(entries) = &mut at_most {
        entries[1].1 = int(11);
    }
    worker.send(&at_most).await;
    let acks = worker.recv_type("acks").await;
    let results = field(&acks, "results")
        .and_then(Value::as_array)
        .expect("results");
    assert_eq!(results.len(), MAX_OUTCOMES);
    assert_eq!(results[0], text("recorded"));
    assert_eq!(read().await?.state, JobState::Completed);
    server.shutdown().await;
    Ok(())
}

/// The Rust client sends a batch of more jobs than one message holds in several messages,
/// each within the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_clients_batch_past_the_bound_goes_in_several_messages() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let client =
        hopper::Client::new(hopper::connect(&url(server.endpoint()), Default::default()).await?);
    let jobs: Vec<hopper::NewJob> = (0..=MAX_BATCH_JOBS)
        .map(|_| hopper::NewJob::new("many", serde_json::json!({})).with_queue("many"))
        .collect();
    client.insert_many(&jobs).await?;
    assert_eq!(
        db.queue_stats("many").await?.available,
        MAX_BATCH_JOBS as i64 + 1
    );
    server.shutdown().await;
    Ok(())
}
