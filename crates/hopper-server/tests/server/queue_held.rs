//! A limited queue's settings row held by another transaction (an admin's change left
//! uncommitted) does not stop the server's dispatch: the server claims for one queue at a
//! time, and the limited queue's claim, which locks that row, waits for it at most 2 s and
//! fails (to be tried again), so the other queues are claimed and their jobs handed out;
//! a claim waiting as long as the holder would stop every queue.

use std::time::Duration;

use crate::common::*;
use ciborium::Value;
use hopper::testing::TestDatabase;
use hopper::{Client, NewJob, QueueUpdate};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_queue_row_stops_only_its_own_queue() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = Client::new(db.backend());
    client
        .update_queue(&QueueUpdate {
            max_running: Some(Some(5)),
            ..QueueUpdate::new("limited")
        })
        .await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let holder = sql(&db).await?;
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM {}.queues WHERE name = 'limited' FOR UPDATE",
            db.schema()
        ))
        .await?;
    let mut peer = RawPeer::connect(server.endpoint()).await;
    let extra = vec![
        ("queues", Value::Array(vec![text("limited"), text("free")])),
        ("concurrency", int(4)),
    ];
    let welcome = peer.hello("worker", TOKEN, extra).await;
    assert_eq!(text_of(&welcome, "type"), "welcome", "{welcome:?}");
    client
        .insert(NewJob::new("k", serde_json::json!({})).with_queue("limited"))
        .await?;
    // The server's claim for the limited queue now waits on the row.
    db.wait_for_lock_waits(1, Duration::from_secs(10)).await?;
    let free = client
        .insert(NewJob::new("k", serde_json::json!({})).with_queue("free"))
        .await?;
    // Within 10 s (the helper's bound), and not the limited queue's.
    let (id, _) = order(&mut peer).await;
    assert_eq!(id, free.to_string());

    holder.batch_execute("COMMIT").await?;
    let (_, attempt) = order(&mut peer).await;
    assert_eq!(attempt, 1, "the limited queue's job, once its row is free");
    Ok(())
}
