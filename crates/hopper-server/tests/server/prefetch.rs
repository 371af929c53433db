//! Extra credit: a worker that announces a `prefetch` is sent orders beyond its concurrency,
//! as many as its slots start in 10 ms at the pace its outcomes report (at least twice its
//! concurrency, at most the prefetch it announced); a worker that announces none is never
//! sent more than its concurrency.

use std::time::Duration;

use crate::common::*;
use ciborium::Value;
use hopper::testing::TestDatabase;
use hopper::{Client, NewJob};

/// An order as the outcome needs it: its id and attempt.
type Order = (String, Value);

/// The jobs of one `orders` push.
fn jobs_of(push: &Value) -> Vec<Order> {
    field(push, "jobs")
        .and_then(Value::as_array)
        .expect("jobs")
        .iter()
        .map(|o| {
            (
                text_of(o, "id").to_owned(),
                field(o, "attempt").cloned().expect("attempt"),
            )
        })
        .collect()
}

/// Reports every order completed after `duration_ms`, in one `outcomes` message, and returns
/// the next `orders` push (which may come before or after the `acks`).
async fn complete_all(peer: &mut RawPeer, req: i64, orders: &[Order], duration_ms: i64) -> Value {
    let items = orders
        .iter()
        .map(|(id, attempt)| {
            map(vec![
                ("outcome", text("completed")),
                ("id", text(id)),
                ("attempt", attempt.clone()),
                ("duration_ms", int(duration_ms)),
            ])
        })
        .collect();
    peer.send(&map(vec![
        ("type", text("outcomes")),
        ("req", int(req)),
        ("outcomes", Value::Array(items)),
    ]))
    .await;
    let mut acked = false;
    let mut push = None;
    while !acked || push.is_none() {
        let v = peer.recv().await;
        match text_of(&v, "type") {
            "acks" => acked = true,
            "orders" => push = Some(v),
            other => panic!("unexpected {other}: {v:?}"),
        }
    }
    push.expect("a push")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_prefetches_gets_credit_sized_to_its_pace() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let direct = Client::new(db.backend());
    let jobs: Vec<NewJob> = (0..100)
        .map(|n| NewJob::new("k", serde_json::json!({ "n": n })).with_queue("fast"))
        .collect();
    direct.insert_many(&jobs).await?;
    let plain: Vec<NewJob> = (0..10)
        .map(|n| NewJob::new("k", serde_json::json!({ "n": n })).with_queue("plain"))
        .collect();
    direct.insert_many(&plain).await?;

    // Concurrency 2, up to 10 ahead. Before any outcome: the floor, twice the concurrency.
    let mut peer = RawPeer::connect(server.endpoint()).await;
    let welcome = peer
        .hello(
            "worker",
            TOKEN,
            vec![
                ("queues", Value::Array(vec![text("fast")])),
                ("concurrency", int(2)),
                ("prefetch", int(10)),
                ("batch", Value::Bool(true)),
            ],
        )
        .await;
    assert_eq!(text_of(&welcome, "type"), "welcome", "{welcome:?}");
    let first = jobs_of(&peer.recv_type("orders").await);
    assert_eq!(first.len(), 2 + 4, "concurrency + twice the concurrency");

    // Sub-millisecond jobs: 2 slots start 40 in 10 ms, so the whole announced 10 ahead.
    let second = jobs_of(&complete_all(&mut peer, 2, &first, 0).await);
    assert_eq!(second.len(), 2 + 10, "concurrency + the announced prefetch");

    // Jobs of a second each: back to the floor.
    let third = jobs_of(&complete_all(&mut peer, 3, &second, 1000).await);
    assert_eq!(third.len(), 2 + 4, "slow jobs: concurrency + the floor");
    let running = db.queue_stats("fast").await?.running;
    assert_eq!(running, 6, "the server claimed only what it sent");

    // A worker that announces no prefetch holds at most its concurrency.
    let mut other = RawPeer::connect(server.endpoint()).await;
    other
        .hello(
            "worker",
            TOKEN,
            vec![
                ("queues", Value::Array(vec![text("plain")])),
                ("concurrency", int(3)),
                ("batch", Value::Bool(true)),
            ],
        )
        .await;
    let orders = jobs_of(&other.recv_type("orders").await);
    assert_eq!(orders.len(), 3);
    let orders = jobs_of(&complete_all(&mut other, 2, &orders, 0).await);
    assert_eq!(orders.len(), 3, "no extra credit without a prefetch");

    // A prefetch over the limit is refused.
    let mut greedy = RawPeer::connect(server.endpoint()).await;
    let refused = greedy
        .hello("worker", TOKEN, vec![("prefetch", int(10_001))])
        .await;
    assert_eq!(text_of(&refused, "type"), "error", "{refused:?}");
    assert!(
        text_of(&refused, "message").contains("prefetch"),
        "{refused:?}"
    );
    server.shutdown().await;
    Ok(())
}

/// A worker of `concurrency` 0 receives no orders, whatever `prefetch` it announced (the
/// Rust transport announces one with its node's concurrency, which may be 0); saying hello
/// again with a concurrency gets it the job that waited.
#[tokio::test]
async fn a_worker_of_concurrency_zero_receives_no_orders() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let mut worker = RawPeer::connect(server.endpoint()).await;
    let r = worker
        .hello(
            "worker",
            TOKEN,
            vec![("concurrency", int(0)), ("prefetch", int(10))],
        )
        .await;
    assert_eq!(text_of(&r, "type"), "welcome", "{r:?}");
    Client::new(db.backend())
        .insert(NewJob::new("k", serde_json::json!({})))
        .await?;
    // Two of the server's once-a-second re-checks of its served queues: no order, no claim.
    worker.set_timeout(Duration::from_millis(2500));
    assert_eq!(worker.try_recv_bytes().await, None);
    assert_eq!(db.queue_stats("default").await?.available, 1);

    let r = worker
        .hello("worker", TOKEN, vec![("concurrency", int(1))])
        .await;
    assert_eq!(text_of(&r, "type"), "welcome", "{r:?}");
    let (_, attempt) = order(&mut worker).await;
    assert_eq!(attempt, 1);
    server.shutdown().await;
    Ok(())
}
