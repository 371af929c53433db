//! After a restart, a worker's heartbeat adopts the leases of the server's earlier run that
//! it lists, once the database says they run under the server's node: they are its orders
//! again, which no other peer may finish. A heartbeat whose database work fails adopts
//! nothing; the worker's next heartbeat adopts them.

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use ciborium::Value;
use hopper::testing::TestDatabase;
use hopper::{PgBackend, PgOptions};

/// A worker of a queue without jobs: it gets no orders of this run.
async fn worker(endpoint: &str, name: &str) -> RawPeer {
    let mut peer = RawPeer::connect(endpoint).await;
    let extra = vec![
        ("name", text(name)),
        ("queues", Value::Array(vec![text("elsewhere")])),
    ];
    let r = peer.hello("worker", TOKEN, extra).await;
    assert_eq!(text_of(&r, "type"), "welcome", "{r:?}");
    peer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_that_failed_adopts_its_leases_at_the_next() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let mut config = config(&db, Duration::from_secs(30)).await;
    // Its statements give up on a lock after 200 ms: the failure the test causes.
    let options = PgOptions::default()
        .with_schema(db.schema())
        .with_pool_size(8)
        .with_lock_timeout(Duration::from_millis(200));
    config.backend = Arc::new(PgBackend::connect(db.url(), options).await?);
    let job = leased_by(&db, config.node_id, 1).await?[0];
    let server = start(config).await;
    let mut holder = worker(server.endpoint(), "holder").await;
    let mut other = worker(server.endpoint(), "other").await;

    // The heartbeat's extend waits for the lock on the jobs table, and gives up.
    let lock = lock_table(&db, "jobs", "SHARE").await?;
    holder.send(&heartbeat_of(2, &[job])).await;
    let r = holder.recv().await;
    assert_eq!(text_of(&r, "type"), "error", "{r:?}");
    assert!(text_of(&r, "message").contains("lock timeout"), "{r:?}");
    lock.batch_execute("COMMIT").await?;

    holder.send(&heartbeat_of(3, &[job])).await;
    let r = holder.recv_type("heartbeat_ack").await;
    assert_eq!(field(&r, "lost"), Some(&Value::Array(Vec::new())), "{r:?}");
    // Adopted: the holder's order, which another peer may not finish.
    other.send(&completed(2, &job.to_string(), 1)).await;
    let r = other.recv_type("ack").await;
    assert_eq!(text_of(&r, "result"), "lease_lost", "{r:?}");
    holder.send(&completed(4, &job.to_string(), 1)).await;
    let r = holder.recv_type("ack").await;
    assert_eq!(text_of(&r, "result"), "recorded", "{r:?}");
    server.shutdown().await;
    Ok(())
}
