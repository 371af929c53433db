//! A node's row in `nodes` held by another transaction (an admin's `SELECT … FOR UPDATE` or
//! change left open) stops nothing but that row's own write: the node's heartbeat waits for
//! it on the side while its leases are renewed, the release of silent nodes skips it rather
//! than wait (every node's rescuer runs that release), and once the row is free the node's
//! waiting heartbeat writes it with the time of the write, so a hold longer than the
//! silent-node bound does not get a live node's jobs released (nor does the write of a
//! node taking its liveness lock again). A stopping runtime waits for its row's deletion
//! at most 5 s.

use std::time::Duration;

use hopper::testing::TestDatabase;
use hopper::{Runtime, TestClock};
use hopper_conformance::Harness;
use hopper_core::JobState;
use hopper_core::backend::NodeReleaseDeadParams;

use crate::support::{
    config, connect, eventually, gated_workers, insert_gated, release_silent_nodes, wait_for,
};

async fn postgres() -> anyhow::Result<Harness> {
    let clock = TestClock::new(hopper_conformance::t0());
    let db = TestDatabase::with_clock(std::sync::Arc::new(clock.clone())).await?;
    Harness::new(db.backend(), clock, db).await
}

/// Opens a transaction on `url` holding every row of `schema`'s `nodes`.
async fn hold_nodes(url: &str, schema: &str) -> anyhow::Result<tokio_postgres::Client> {
    let holder = connect(url).await?;
    holder
        .batch_execute(&format!("BEGIN; SELECT 1 FROM {schema}.nodes FOR UPDATE"))
        .await?;
    Ok(holder)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_node_row_does_not_stop_the_lease_renewals() -> anyhow::Result<()> {
    let h = postgres().await?;
    let db = h.store::<TestDatabase>().expect("a TestDatabase harness");
    let gated = insert_gated(db, "held").await?;
    let (workers, reached, go) = gated_workers();
    // Leases of 1 s, renewed every 200 ms or so.
    let config = config("held", 1).with_lease(Duration::from_secs(1));
    let handle = Runtime::new(db.backend(), workers, config).start().await?;
    reached.notified().await;
    let holder = hold_nodes(db.url(), db.schema()).await?;
    db.wait_for_lock_waits(1, Duration::from_secs(10))
        .await
        .map_err(anyhow::Error::msg)?;
    // The node's heartbeat now waits on its row; the renewals must go on.
    h.clock.advance(chrono::Duration::milliseconds(500));
    let renewed = hopper_conformance::t0() + chrono::Duration::milliseconds(1500);
    let sql = connect(db.url()).await?;
    let expiry = format!(
        "SELECT lease_expires_at FROM {}.jobs WHERE id = $1",
        db.schema()
    );
    let what = "no lease renewed while the node's row was held";
    eventually(Duration::from_secs(10), what, || async {
        let at: chrono::DateTime<chrono::Utc> = sql.query_one(&expiry, &[&gated]).await?.get(0);
        Ok(at >= renewed)
    })
    .await?;
    holder.batch_execute("COMMIT").await?;
    go.notify_one();
    wait_for(db, "held", Duration::from_secs(10), |s| s.completed == 1).await?;
    handle.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn the_release_of_silent_nodes_skips_a_held_node_row() -> anyhow::Result<()> {
    let h = postgres().await?;
    let silent = hopper_conformance::node_info("silent");
    h.backend.node_heartbeat(&silent).await?;
    h.backend
        .job_insert_many(&[hopper_conformance::job("k", "q")])
        .await?;
    let claimed = h
        .claim_as(silent.id, "q", 1, Duration::from_secs(600))
        .await?;
    let db = h.store::<TestDatabase>().expect("a TestDatabase harness");
    let holder = hold_nodes(db.url(), db.schema()).await?;
    h.advance(Duration::from_secs(40));
    assert_eq!(
        release_silent_nodes(&h).await?,
        0,
        "the held node is left alone"
    );
    assert_eq!(
        h.get(claimed[0].lease.job_id).await?.state,
        JobState::Running
    );

    holder.batch_execute("COMMIT").await?;
    assert_eq!(release_silent_nodes(&h).await?, 1);
    assert_eq!(
        h.get(claimed[0].lease.job_id).await?.state,
        JobState::Available
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_row_was_held_past_the_silent_bound_keeps_its_jobs() -> anyhow::Result<()> {
    // The database's own clock: the heartbeat that waited writes the time it writes.
    let db = TestDatabase::new().await?;
    let gated = insert_gated(&db, "held").await?;
    let (workers, reached, go) = gated_workers();
    // Silent after 1 s; the runtime's own rescuer checks every 100 ms.
    let config = config("held", 1).with_node_dead_after(Duration::from_secs(1));
    let handle = Runtime::new(db.backend(), workers, config).start().await?;
    reached.notified().await;
    let holder = hold_nodes(db.url(), db.schema()).await?;
    // Held until the row looks silent (its heartbeat older than the bound).
    let sql = connect(db.url()).await?;
    until_silent(&sql, db.schema(), handle.node_id()).await?;
    holder.batch_execute("COMMIT").await?;
    // The rescuer's checks go on every 100 ms; the waiting heartbeat must have won.
    let release = NodeReleaseDeadParams {
        dead_after: Duration::from_secs(1),
    };
    let maintenance = db.backend();
    let store = maintenance.maintenance().expect("PostgreSQL maintains");
    assert_eq!(store.node_release_dead(&release).await?, 0);
    go.notify_one();
    wait_for(&db, "held", Duration::from_secs(10), |s| s.completed == 1).await?;
    let record = db
        .backend()
        .job_get(&hopper_core::backend::JobGetParams { id: gated })
        .await?
        .expect("the job");
    assert_eq!(
        (record.attempt, record.errors.len()),
        (1, 0),
        "run once: {:?}",
        record.errors
    );
    handle.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_node_row_does_not_stop_a_runtime_from_stopping() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (workers, _reached, _go) = gated_workers();
    let handle = Runtime::new(db.backend(), workers, config("held", 1))
        .start()
        .await?;
    let holder = hold_nodes(db.url(), db.schema()).await?;
    // The deletion of its row waits on the holder; the stop must not.
    tokio::time::timeout(Duration::from_secs(15), handle.shutdown())
        .await
        .map_err(|_| anyhow::anyhow!("the runtime's stop waited on its held node row"))?;
    holder.batch_execute("COMMIT").await?;
    // The deletion, left queued on the row, ends once it is free.
    let sql = connect(db.url()).await?;
    let count = format!("SELECT count(*) FROM {}.nodes", db.schema());
    eventually(
        Duration::from_secs(10),
        "the node's row was never deleted",
        || async { Ok(sql.query_one(&count, &[]).await?.get::<_, i64>(0) == 0) },
    )
    .await?;
    Ok(())
}

/// Waits until the row of `node` says it was last alive 1.5 s ago or more: past the 1 s
/// silent bound of the tests.
async fn until_silent(
    sql: &tokio_postgres::Client,
    schema: &str,
    node: uuid::Uuid,
) -> anyhow::Result<()> {
    eventually(Duration::from_secs(10), "the row never aged", || async {
        Ok(silent_for(sql, schema, node).await? >= 1.5)
    })
    .await
}

/// How long ago (s) the row of `node` says it was alive, read on `sql`.
async fn silent_for(
    sql: &tokio_postgres::Client,
    schema: &str,
    node: uuid::Uuid,
) -> anyhow::Result<f64> {
    let age = format!(
        "SELECT extract(epoch FROM clock_timestamp() - heartbeat_at)::float8 FROM {schema}.nodes WHERE id = $1"
    );
    Ok(sql.query_one(&age, &[&node]).await?.get(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_taking_its_lock_through_a_held_row_writes_the_time_it_writes() -> anyhow::Result<()>
{
    // The database's own clock, as in production.
    let db = TestDatabase::new().await?;
    let node = hopper_conformance::node_info("retaking");
    db.backend().node_heartbeat(&node).await?;
    let holder = hold_nodes(db.url(), db.schema()).await?;
    // Taking its lock again (after its lock session ended), the node waits on its row, a
    // second at most per try, and tries again as the runtime and the server do.
    let (backend, id) = (db.backend(), node.id);
    let hold = tokio::spawn(async move {
        let liveness = backend.node_liveness().expect("PostgreSQL tracks liveness");
        let mut refused = 0;
        loop {
            match liveness.node_hold(&node).await {
                Ok(lock) => return (lock, refused),
                Err(e) => {
                    assert!(e.to_string().contains("lock"), "{e}");
                    refused += 1;
                }
            }
        }
    });
    db.wait_for_lock_waits(1, Duration::from_secs(10))
        .await
        .map_err(anyhow::Error::msg)?;
    let sql = connect(db.url()).await?;
    until_silent(&sql, db.schema(), id).await?;
    holder.batch_execute("COMMIT").await?;
    let (_lock, refused) = hold.await?;
    assert!(refused >= 1, "no try gave up at its bound");
    // Written once free, with that moment: not silent for the wait it went through.
    let silent = silent_for(&sql, db.schema(), id).await?;
    assert!(
        silent < 1.0,
        "the row says the node was last alive {silent:.1} s ago"
    );
    Ok(())
}
