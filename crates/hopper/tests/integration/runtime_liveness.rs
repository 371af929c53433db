//! Node liveness on PostgreSQL, seen from a running runtime: the node holds an advisory
//! lock on a session of its own, and when that session ends while the process lives (a
//! dropped connection, a network cut) the node is fenced, its jobs may be released by
//! others, and it takes its lock again under the same id without any attempt completing
//! twice.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::{FnWorker, config, connect, wait_for};
use hopper::core::NodeLiveness;
use hopper::testing::TestDatabase;
use hopper::{Client, JobListParams, JobState, NewJob, Runtime, Workers};
use tokio_postgres::Client as PgClient;

job_kind!(Held, "held");

const QUEUE: &str = "liveness";

/// The session holding `node`'s liveness lock, if any.
async fn lock_holder(sql: &PgClient, node: uuid::Uuid) -> anyhow::Result<Option<i32>> {
    let row = sql
        .query_opt(
            "SELECT l.pid FROM pg_locks AS l
             WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
               AND ((l.classid::bigint << 32) | l.objid::bigint)
                   = hashtextextended('hopper node ' || $1::uuid::text, 0)",
            &[&node],
        )
        .await?;
    Ok(row.map(|r| r.get(0)))
}

#[tokio::test]
async fn a_node_whose_lock_session_ends_is_fenced_then_takes_its_lock_again() -> anyhow::Result<()>
{
    let db = TestDatabase::new().await?;
    let sql = connect(db.url()).await?;
    // First attempts wait until their handler is stopped; later ones complete at once.
    let stopped = Arc::new(AtomicUsize::new(0));
    let mut workers = Workers::new();
    let seen = stopped.clone();
    workers.register(FnWorker::new(move |ctx, _: Held| {
        let seen = seen.clone();
        async move {
            if ctx.attempt() == 1 {
                ctx.cancellation().cancelled().await;
                seen.fetch_add(1, Ordering::SeqCst);
            }
            Ok(())
        }
    }));
    let node = Runtime::new(db.backend(), workers, config(QUEUE, 2))
        .start()
        .await?;
    let client = Client::new(db.backend());
    for n in 0..2 {
        client
            .insert(NewJob::of(&Held { n })?.with_queue(QUEUE))
            .await?;
    }
    wait_for(&db, QUEUE, Duration::from_secs(10), |s| s.running == 2).await?;
    let first = lock_holder(&sql, node.node_id())
        .await?
        .ok_or_else(|| anyhow::anyhow!("the node holds no liveness lock"))?;

    // Its lock session ends while the process lives; another node is looking.
    sql.execute("SELECT pg_terminate_backend($1)", &[&first])
        .await?;
    let mut released = 0;
    for _ in 0..500 {
        released = db.pg().node_release_vanished().await?;
        if released > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The other node saw the lock free before the fenced node (which waits 100 ms before
    // it takes its lock again) could take it back.
    assert_eq!(released, 2, "the node's jobs were released");

    // It holds its lock again, in a new session, under the same id; the handlers of the
    // released attempts are stopped (their leases are lost), and the jobs run again.
    wait_for(&db, QUEUE, Duration::from_secs(10), |s| s.completed == 2).await?;
    let again = lock_holder(&sql, node.node_id())
        .await?
        .ok_or_else(|| anyhow::anyhow!("the node never took its lock again"))?;
    assert_ne!(again, first);
    assert_eq!(stopped.load(Ordering::SeqCst), 2);
    let jobs = client
        .jobs(&JobListParams {
            queue: Some(QUEUE.to_owned()),
            limit: 10,
            ..JobListParams::default()
        })
        .await?;
    for job in &jobs {
        assert_eq!(job.state, JobState::Completed, "{job:?}");
        assert_eq!(
            job.attempt, 2,
            "completed once, by its second attempt: {job:?}"
        );
        assert_eq!(job.errors.len(), 1, "{job:?}");
        assert!(job.errors[0].error.contains("vanished"), "{:?}", job.errors);
        assert_eq!(job.node_id, Some(node.node_id()));
    }
    node.shutdown().await;
    // A clean shutdown deregisters before it gives the lock back: nothing to release.
    assert_eq!(db.pg().node_release_vanished().await?, 0);
    // The lock goes with its session, which the server ends after the client closed it:
    // it may still show for a moment after the shutdown returned.
    let node_id = jobs[0].node_id.unwrap_or_default();
    let mut holder = lock_holder(&sql, node_id).await?;
    for _ in 0..500 {
        if holder.is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        holder = lock_holder(&sql, node_id).await?;
    }
    assert_eq!(holder, None, "the lock is given back");
    Ok(())
}

/// The sessions waiting on a lock that the session `pid` holds.
async fn blocked_by(sql: &PgClient, pid: i32) -> anyhow::Result<i64> {
    let row = sql
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
            &[&pid],
        )
        .await?;
    Ok(row.get(0))
}

/// Ends `node`'s lock session while `holder` holds its row; returns once the node's
/// registration waits on that row.
async fn lose_lock_behind_held_row(
    sql: &PgClient,
    holder: &tokio_postgres::Transaction<'_>,
    schema: &str,
    node: uuid::Uuid,
) -> anyhow::Result<()> {
    let holder_pid: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .await?
        .get(0);
    let locked = format!("SELECT 1 FROM {schema}.nodes WHERE id = $1 FOR UPDATE");
    assert_eq!(holder.execute(&locked, &[&node]).await?, 1);
    let session = lock_holder(sql, node)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the node holds no liveness lock"))?;
    sql.execute("SELECT pg_terminate_backend($1)", &[&session])
        .await?;
    for _ in 0..1000 {
        if blocked_by(sql, holder_pid).await? > 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    anyhow::bail!("the node never waited on its held row")
}

#[tokio::test]
async fn a_node_retaking_its_lock_while_its_row_is_held_still_stops() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let sql = connect(db.url()).await?;
    let mut holder = connect(db.url()).await?;
    let node = Runtime::new(db.backend(), Workers::new(), config(QUEUE, 1))
        .start()
        .await?;
    let first = lock_holder(&sql, node.node_id()).await?;

    // An operator holds the node's row as its lock session ends: the node takes its lock
    // again once the row is free.
    let held = holder.transaction().await?;
    lose_lock_behind_held_row(&sql, &held, db.schema(), node.node_id()).await?;
    held.rollback().await?;
    let freed: chrono::DateTime<chrono::Utc> = sql.query_one("SELECT now()", &[]).await?.get(0);
    // A failed try writes nothing: a row written after the hold ended is a retaken lock
    // (or a heartbeat, which a fenced node does not send).
    let written = format!(
        "SELECT heartbeat_at FROM {}.nodes WHERE id = $1",
        db.schema()
    );
    let mut retaken = false;
    for _ in 0..1000 {
        let row = sql.query_opt(&written, &[&node.node_id()]).await?;
        let beat: Option<chrono::DateTime<chrono::Utc>> = row.map(|r| r.get(0));
        if beat.is_some_and(|b| b > freed) {
            retaken = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let again = lock_holder(&sql, node.node_id()).await?;
    assert!(
        retaken && again.is_some() && again != first,
        "never retaken: {again:?}"
    );

    // The same again, and the node is asked to stop while the row is still held: it
    // stops, its retake giving up at its bound instead of waiting for the holder (and its
    // deregistration waiting 5 s at most).
    let held = holder.transaction().await?;
    lose_lock_behind_held_row(&sql, &held, db.schema(), node.node_id()).await?;
    tokio::time::timeout(Duration::from_secs(20), node.shutdown())
        .await
        .map_err(|_| anyhow::anyhow!("the shutdown waited on the held row"))?;
    held.rollback().await?;
    Ok(())
}
