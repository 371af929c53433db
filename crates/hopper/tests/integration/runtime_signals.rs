//! The runtime reacting to the outside world: cancellation, graceful shutdown, wake-ups
//! by notification, prompt retries, and completing inside the handler's own transaction.
//!
//! Polling is set to 30 s in these tests, so anything that happens sooner happened
//! because of a signal (LISTEN/NOTIFY, the promoter's wake-up), not by polling.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{FnWorker, connect, wait_for};
use hopper::backend::JobGetParams;
use hopper::testing::TestDatabase;
use hopper::{
    Client, JobError, JobId, JobRecord, JobState, NewJob, Runtime, RuntimeConfig, RuntimeHandle,
    Workers,
};
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

job_kind!(Signal, "signal");

const QUEUE: &str = "signals";

/// Longest wait for what a notification brings: well under the poll interval and the
/// heartbeat (10 s, a third of the lease) of [`quiet_config`], so an event seen within it
/// came by notification, not by a poll or a lease renewal. A failsafe, not a figure: the
/// tests wait for the event itself.
const PROMPTLY: Duration = Duration::from_secs(5);

/// A runtime that polls only every 30 s and heartbeats every 10 s: what it does sooner,
/// it was told to.
fn quiet_config(concurrency: usize) -> RuntimeConfig {
    crate::support::config(QUEUE, concurrency)
        .with_poll_interval(Duration::from_secs(30))
        .with_heartbeat_interval(Duration::from_secs(30))
}

async fn insert(db: &TestDatabase, n: u64) -> anyhow::Result<JobId> {
    Ok(Client::new(db.backend())
        .insert(NewJob::of(&Signal { n })?.with_queue(QUEUE))
        .await?)
}

async fn get(db: &TestDatabase, id: JobId) -> anyhow::Result<JobRecord> {
    Ok(db
        .backend()
        .job_get(&JobGetParams { id })
        .await?
        .expect("the job exists"))
}

/// Waits until `runtimes` notification listeners are connected, so that what follows can
/// only be noticed through them.
async fn wait_listening(db: &TestDatabase, runtimes: i64) -> anyhow::Result<()> {
    let client = connect(db.url()).await?;
    let listen = format!("LISTEN \"{}_wake\"", db.schema());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let row = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE query = $1",
                &[&listen],
            )
            .await?;
        if row.get::<_, i64>(0) >= runtimes {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "the runtime never listened");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether `node` has a row in `nodes`.
async fn registered(db: &TestDatabase, node: uuid::Uuid) -> anyhow::Result<bool> {
    let sql = connect(db.url()).await?;
    let count = format!("SELECT count(*) FROM {}.nodes WHERE id = $1", db.schema());
    Ok(sql.query_one(&count, &[&node]).await?.get::<_, i64>(0) > 0)
}

async fn start(db: &TestDatabase, workers: Workers, config: RuntimeConfig) -> RuntimeHandle {
    Runtime::new(db.backend(), workers, config)
        .start()
        .await
        .expect("the runtime starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_running_job_fires_its_token_promptly() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (token_tx, mut tokens) = mpsc::unbounded_channel::<CancellationToken>();
    let mut workers = Workers::new();
    let (dropped_tx, mut dropped) = mpsc::unbounded_channel::<()>();
    workers.register(FnWorker::new(move |ctx, _: Signal| {
        let _ = token_tx.send(ctx.cancellation().clone());
        let on_drop = SendOnDrop(dropped_tx.clone());
        async move {
            let _on_drop = on_drop;
            std::future::pending::<()>().await;
            Ok(())
        }
    }));
    let id = insert(&db, 0).await?;
    let handle = start(&db, workers, quiet_config(2)).await;
    let token = tokio::time::timeout(Duration::from_secs(10), tokens.recv())
        .await?
        .expect("the handler started");
    assert!(!token.is_cancelled());
    // The job was claimed at once; the cancellation must not race the listener's start.
    wait_listening(&db, 1).await?;

    let record = Client::new(db.backend()).cancel(id).await?;
    assert_eq!(record.state, JobState::Cancelled);
    tokio::time::timeout(PROMPTLY, token.cancelled()).await?;
    // The handler is stopped: its future dropped.
    tokio::time::timeout(PROMPTLY, dropped.recv()).await?;
    handle.shutdown().await;
    let job = get(&db, id).await?;
    assert_eq!(job.state, JobState::Cancelled);
    assert!(job.errors.is_empty(), "{:?}", job.errors);
    assert_eq!(job.attempt, 1);
    Ok(())
}

/// Sends on its channel when dropped: a handler holding it was stopped.
struct SendOnDrop(mpsc::UnboundedSender<()>);

impl Drop for SendOnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// A handler that runs until its token is cancelled, then says so and fails, as a handler
/// that cleans up and gives up would.
fn watcher(
    started: mpsc::UnboundedSender<JobId>,
    saw: mpsc::UnboundedSender<JobId>,
) -> FnWorker<Signal> {
    FnWorker::new(move |ctx, _: Signal| {
        let (started, saw) = (started.clone(), saw.clone());
        async move {
            let _ = started.send(ctx.id());
            tokio::select! {
                _ = ctx.cancellation().cancelled() => {
                    let _ = saw.send(ctx.id());
                    Err(JobError::permanent("stopped: the token was cancelled"))
                }
                _ = tokio::time::sleep(Duration::from_secs(600)) => Ok(()),
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_watching_its_token_gets_to_react_to_a_cancellation() -> anyhow::Result<()> {
    const JOBS: u64 = 6;
    let db = TestDatabase::new().await?;
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (saw_tx, mut saw) = mpsc::unbounded_channel();
    let mut workers = Workers::new();
    workers.register(watcher(started_tx, saw_tx));
    let mut ids = Vec::new();
    for n in 0..JOBS {
        ids.push(insert(&db, n).await?);
    }
    let handle = start(&db, workers, quiet_config(JOBS as usize)).await;
    for _ in 0..JOBS {
        tokio::time::timeout(Duration::from_secs(10), started.recv()).await?;
    }
    wait_listening(&db, 1).await?;
    let client = Client::new(db.backend());
    for id in &ids {
        client.cancel(*id).await?;
    }
    // Each handler sees its token fire and runs its reaction: none is dropped unawares.
    let mut reacted = Vec::new();
    for _ in 0..JOBS {
        let id = tokio::time::timeout(PROMPTLY, saw.recv()).await?;
        reacted.extend(id);
    }
    reacted.sort();
    ids.sort();
    assert_eq!(reacted, ids);
    handle.shutdown().await;
    for id in ids {
        let job = get(&db, id).await?;
        assert_eq!(job.state, JobState::Cancelled);
        assert!(job.errors.is_empty(), "{:?}", job.errors);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_giving_up_at_shutdown_is_released_not_failed() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (saw_tx, mut saw) = mpsc::unbounded_channel();
    let mut workers = Workers::new();
    workers.register(watcher(started_tx, saw_tx));
    let mut ids = Vec::new();
    for n in 0..4 {
        ids.push(insert(&db, n).await?);
    }
    let handle = start(&db, workers, quiet_config(4)).await;
    for _ in 0..4 {
        tokio::time::timeout(Duration::from_secs(10), started.recv()).await?;
    }
    handle.shutdown_within(Duration::from_millis(100)).await;
    for id in ids {
        let job = get(&db, id).await?;
        assert_eq!(job.state, JobState::Available, "released, not failed");
        assert_eq!(job.uncounted, 1);
        assert!(job.errors.is_empty(), "no penalty: {:?}", job.errors);
    }
    assert!(saw.try_recv().is_ok(), "the handlers saw their tokens");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_short_jobs_finish_and_releases_long_ones() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (started_tx, mut started) = mpsc::unbounded_channel::<u64>();
    let finish_short = Arc::new(Notify::new());
    let release = finish_short.clone();
    let mut workers = Workers::new();
    workers.register(FnWorker::new(move |_ctx, args: Signal| {
        let _ = started_tx.send(args.n);
        let release = release.clone();
        async move {
            if args.n == 0 {
                // Far longer than the shutdown deadline.
                tokio::time::sleep(Duration::from_secs(600)).await;
            } else {
                release.notified().await;
            }
            Ok(())
        }
    }));
    let long = insert(&db, 0).await?;
    let short = insert(&db, 1).await?;
    let handle = start(&db, workers, quiet_config(2)).await;
    let node = handle.node_id();
    for _ in 0..2 {
        tokio::time::timeout(Duration::from_secs(10), started.recv()).await?;
    }

    let began = Instant::now();
    let shutdown = tokio::spawn(handle.shutdown_within(Duration::from_secs(1)));
    finish_short.notify_one();
    tokio::time::timeout(Duration::from_secs(15), shutdown).await??;
    assert!(
        began.elapsed() >= Duration::from_secs(1),
        "waited for the deadline"
    );

    let short = get(&db, short).await?;
    assert_eq!(short.state, JobState::Completed);
    let long = get(&db, long).await?;
    assert_eq!(long.state, JobState::Available, "handed back at once");
    assert_eq!(
        (long.attempt, long.uncounted),
        (1, 1),
        "attempt not counted"
    );
    assert!(long.errors.is_empty(), "no penalty: {:?}", long.errors);
    assert_eq!(long.lease_expires_at, None);
    assert!(!registered(&db, node).await?, "the node deregistered");
    Ok(())
}

/// A handler that never yields (it blocks its thread) cannot be dropped at the shutdown
/// deadline. Having moved its lease ten years ahead, its job must not stay running once
/// the node is gone, with nobody to release it until then: the node's deregistration,
/// once the last outcomes are written, releases it as a dead node's job, the attempt
/// counted, and the stop does not wait for the handler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_deaf_to_the_shutdown_leaves_no_job_running() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (started_tx, mut started) = mpsc::unbounded_channel::<()>();
    let (unblock_tx, unblock_rx) = std::sync::mpsc::channel::<()>();
    let unblock_rx = Arc::new(Mutex::new(unblock_rx));
    let mut workers = Workers::new();
    workers.register(FnWorker::new(move |ctx, _: Signal| {
        let (started_tx, unblock_rx) = (started_tx.clone(), unblock_rx.clone());
        async move {
            ctx.extend(hopper::limits::MAX_DURATION).await?;
            let _ = started_tx.send(());
            // Until the test lets it go, whatever the runtime asks.
            tokio::task::block_in_place(|| {
                let _ = unblock_rx.lock().unwrap_or_else(|e| e.into_inner()).recv();
            });
            Ok(())
        }
    }));
    let id = insert(&db, 0).await?;
    let handle = start(&db, workers, quiet_config(1)).await;
    let node = handle.node_id();
    tokio::time::timeout(Duration::from_secs(10), started.recv()).await?;
    let lease = get(&db, id).await?.lease_expires_at.expect("a lease");
    assert!(
        lease > chrono::Utc::now() + chrono::Duration::days(9 * 365),
        "the lease was moved years ahead: {lease}"
    );

    let began = Instant::now();
    handle.shutdown_within(Duration::from_millis(100)).await;
    assert!(
        began.elapsed() < Duration::from_secs(15),
        "the stop waited {:?}, for the handler or its outcome",
        began.elapsed()
    );
    let job = get(&db, id).await?;
    hopper_conformance::nodes::ensure_released_by_stop(&job, JobState::Available, node)?;
    assert!(!registered(&db, node).await?, "the node deregistered");
    // Let go, the handler ends; the stopped runtime takes no outcome from it.
    drop(unblock_tx);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_released_at_shutdown_is_taken_over_promptly() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (started_tx, mut started) = mpsc::unbounded_channel::<i32>();
    let workers = || {
        let started_tx = started_tx.clone();
        let mut workers = Workers::new();
        workers.register(FnWorker::new(move |ctx, _: Signal| {
            let _ = started_tx.send(ctx.lease().attempt);
            async move {
                if ctx.lease().attempt == 1 {
                    tokio::time::sleep(Duration::from_secs(600)).await;
                }
                Ok(())
            }
        }));
        workers
    };
    let id = insert(&db, 0).await?;
    let leaving = start(&db, workers(), quiet_config(1)).await;
    let first = tokio::time::timeout(Duration::from_secs(10), started.recv()).await?;
    assert_eq!(first, Some(1));
    // A second node, idle: the only job is running elsewhere.
    let staying = start(&db, workers(), quiet_config(1)).await;
    wait_listening(&db, 2).await?;

    leaving.shutdown_within(Duration::from_millis(100)).await;
    let attempt = tokio::time::timeout(PROMPTLY, started.recv())
        .await?
        .expect("taken over");
    assert_eq!(attempt, 2);
    wait_for(&db, QUEUE, Duration::from_secs(10), |s| s.completed == 1).await?;
    staying.shutdown().await;
    let job = get(&db, id).await?;
    assert_eq!((job.attempt, job.uncounted), (2, 1));
    assert!(job.errors.is_empty(), "{:?}", job.errors);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_runtime_starts_a_new_job_when_told() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (started_tx, mut started) = mpsc::unbounded_channel::<()>();
    let mut workers = Workers::new();
    workers.register(FnWorker::new(move |_ctx, _: Signal| {
        let _ = started_tx.send(());
        async { Ok(()) }
    }));
    let handle = start(&db, workers, quiet_config(4)).await;
    wait_listening(&db, 1).await?;
    for n in 0..3 {
        insert(&db, n).await?;
        tokio::time::timeout(PROMPTLY, started.recv())
            .await?
            .expect("the handler ran");
        wait_for(&db, QUEUE, Duration::from_secs(10), |s| {
            s.completed == n as i64 + 1
        })
        .await?;
    }
    handle.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_with_a_short_backoff_runs_again_promptly() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (runs_tx, mut runs) = mpsc::unbounded_channel::<(i32, Instant)>();
    let mut workers = Workers::new();
    workers.register(
        FnWorker::new(move |ctx, args: Signal| {
            let _ = runs_tx.send((ctx.attempt(), Instant::now()));
            async move {
                if args.n == 1 && ctx.attempt() == 1 {
                    Err(JobError::retry("try again shortly"))
                } else {
                    Ok(())
                }
            }
        })
        .with_backoff(Duration::from_millis(20)),
    );
    let handle = start(&db, workers, quiet_config(2)).await;
    // Let the runtime settle into idleness first (its promoter's first pass, at start,
    // would otherwise find the retry and wait for it without being told).
    wait_listening(&db, 1).await?;
    insert(&db, 0).await?;
    let warm_up = tokio::time::timeout(Duration::from_secs(10), runs.recv()).await?;
    assert_eq!(warm_up.map(|r| r.0), Some(1));
    wait_for(&db, QUEUE, Duration::from_secs(10), |s| s.completed == 1).await?;

    let id = insert(&db, 1).await?;
    let (first, failed_at) = tokio::time::timeout(Duration::from_secs(10), runs.recv())
        .await?
        .expect("first run");
    // The promoter found nothing scheduled at its last pass: it sleeps the 30 s poll
    // interval unless the retry wakes it.
    let (second, again_at) = tokio::time::timeout(PROMPTLY, runs.recv())
        .await?
        .expect("second run");
    assert_eq!((first, second), (1, 2));
    let gap = again_at - failed_at;
    assert!(
        gap >= Duration::from_millis(20),
        "not before the backoff: {gap:?}"
    );
    wait_for(&db, QUEUE, Duration::from_secs(10), |s| s.completed == 2).await?;
    handle.shutdown().await;
    assert_eq!(get(&db, id).await?.errors.len(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_completes_inside_its_own_transaction() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let schema = db.schema().to_owned();
    let sql = connect(db.url()).await?;
    sql.batch_execute(&format!(
        "CREATE TABLE {schema}.side_effects (job uuid NOT NULL, attempt int NOT NULL)"
    ))
    .await?;
    let url = db.url().to_owned();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let mut workers = Workers::new();
    workers.register(FnWorker::new(move |ctx, args: Signal| {
        let (url, schema, log) = (url.clone(), schema.clone(), log.clone());
        async move {
            log.lock()
                .expect("not poisoned")
                .push((args.n, ctx.attempt()));
            let mut conn = connect(&url).await.map_err(JobError::retry)?;
            let tx = conn.transaction().await?;
            tx.execute(
                &format!("INSERT INTO {schema}.side_effects VALUES ($1, $2)"),
                &[&ctx.id(), &ctx.attempt()],
            )
            .await?;
            ctx.complete_in(&tx).await.map_err(JobError::retry)?;
            if args.n == 1 && ctx.attempt() == 1 {
                // The application's write fails after all: its transaction, with the
                // job's completion, rolls back, and the job must run again.
                tx.rollback().await?;
                return Err(JobError::retry("rolled back"));
            }
            tx.commit().await?;
            Ok(())
        }
    }));
    let committed = insert(&db, 0).await?;
    let rolled_back = insert(&db, 1).await?;
    let handle = start(&db, workers, quiet_config(2)).await;
    wait_for(&db, QUEUE, Duration::from_secs(10), |s| s.completed == 2).await?;
    handle.shutdown().await;

    let job = get(&db, committed).await?;
    assert_eq!((job.state, job.attempt), (JobState::Completed, 1));
    assert!(job.errors.is_empty(), "{:?}", job.errors);
    let job = get(&db, rolled_back).await?;
    assert_eq!((job.state, job.attempt), (JobState::Completed, 2));
    assert_eq!(job.errors.len(), 1);
    assert_eq!(job.errors[0].error, "rolled back");
    let rows = sql
        .query(
            &format!(
                "SELECT job, attempt FROM {}.side_effects ORDER BY attempt",
                db.schema()
            ),
            &[],
        )
        .await?;
    let rows: Vec<(JobId, i32)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let mut expected = vec![(committed, 1), (rolled_back, 2)];
    expected.sort_by_key(|r| r.1);
    assert_eq!(rows, expected, "one committed write per completed job");
    let mut runs = seen.lock().expect("not poisoned").clone();
    runs.sort();
    assert_eq!(runs, vec![(0, 1), (1, 1), (1, 2)], "each run once");
    Ok(())
}
