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
