//! How the runtime turns a handler's failures into outcomes: panics, timeouts, permanent
//! errors, snoozes, undecodable arguments and kinds nobody handles.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::{FnWorker, config, wait_for};
use hopper::backend::JobGetParams;
use hopper::testing::TestDatabase;
use hopper::{
    Client, JobArgs, JobError, JobId, JobRecord, JobState, NewJob, Runtime, RuntimeConfig,
    RuntimeHandle, Workers,
};
use serde_json::json;
use tokio::sync::oneshot;

job_kind!(Flaky, "flaky");

const QUEUE: &str = "failures";

async fn start(db: &TestDatabase, workers: Workers, config: RuntimeConfig) -> RuntimeHandle {
    Runtime::new(db.backend(), workers, config)
        .start()
        .await
        .expect("the runtime starts")
}

async fn insert(db: &TestDatabase, job: NewJob) -> anyhow::Result<JobId> {
    Ok(Client::new(db.backend())
        .insert(job.with_queue(QUEUE))
        .await?)
}

fn flaky(max_attempts: i32) -> NewJob {
    NewJob::of(&Flaky { n: 0 })
        .expect("encodes")
        .with_max_attempts(max_attempts)
}

async fn get(db: &TestDatabase, id: JobId) -> anyhow::Result<JobRecord> {
    Ok(db
        .backend()
        .job_get(&JobGetParams { id })
        .await?
        .expect("the job exists"))
}

/// Sends on drop: tells the test a handler future was dropped (cancelled) mid-run.
struct DropSignal(Option<oneshot::Sender<()>>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_a_failed_attempt() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let mut workers = Workers::new();
    workers.register(FnWorker::new(|ctx, _: Flaky| async move {
        if ctx.attempt() == 1 {
            panic!("boom on attempt {}", ctx.attempt());
        }
        Ok(())
    }));
    let id = insert(&db, flaky(2)).await?;
    let handle = start(&db, workers, config(QUEUE, 2)).await;
    wait_for(&db, QUEUE, Duration::from_secs(10), |s| s.completed == 1).await?;
    handle.shutdown().await;
    let job = get(&db, id).await?;
    assert_eq!(job.errors.len(), 1);
    let error = &job.errors[0].error;
    assert!(error.contains("panicked"), "{error}");
    assert!(error.contains("boom on attempt 1"), "{error}");
    assert_eq!(job.attempt, 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_past_its_timeout_is_cancelled_and_retried() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (dropped_tx, dropped) = oneshot::channel();
    let dropped_tx = Arc::new(std::sync::Mutex::new(Some(dropped_tx)));
    let mut workers = Workers::new();
    workers.register(FnWorker::new(move |ctx, _: Flaky| {
        let signal = DropSignal(dropped_tx.lock().expect("not poisoned").take());
        async move {
            if ctx.attempt() == 1 {
                let _signal = signal;
                std::future::pending::<()>().await;
            }
            Ok(())
        }
    }));
    let id = insert(&db, flaky(2).with_timeout(Duration::from_millis(300))).await?;
    // No rescuer: the runtime's own timeout must act, not the expiry of the lease it
    // was granted (which the claim caps at the same 300 ms).
    let mut config = config(QUEUE, 2);
    config.rescue_interval = Duration::from_secs(600);
    let handle = start(&db, workers, config).await;
    tokio::time::timeout(Duration::from_secs(5), dropped).await??;
    wait_for(&db, QUEUE, Duration::from_secs(10), |s| s.completed == 1).await?;
    handle.shutdown().await;
    let job = get(&db, id).await?;
    assert_eq!(job.errors.len(), 1);
    let e = &job.errors[0];
    assert!(e.error.contains("timed out"), "{}", e.error);
    assert!(
        e.duration_ms.is_some_and(|ms| ms >= 300),
        "the attempt ran its full timeout: {e:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_keeps_a_job_past_its_original_timeout() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let mut workers = Workers::new();
    workers.register(FnWorker::new(move |ctx, _: Flaky| {
        counter.fetch_add(1, Ordering::SeqCst);
        async move {
            ctx.extend(Duration::from_secs(10)).await?;
            // Work well past the original 200 ms timeout (and lease).
            tokio::time::sleep(Duration::from_millis(700)).await;
            Ok(())
        }
    }));
    let id = insert(&db, flaky(3).with_timeout(Duration::from_millis(200))).await?;
    let handle = start(&db, workers, config(QUEUE, 2)).await;
    wait_for(&db, QUEUE, Duration::from_secs(10), |s| s.completed == 1).await?;
    handle.shutdown().await;
    let job = get(&db, id).await?;
    assert!(job.errors.is_empty(), "{:?}", job.errors);
    assert_eq!(job.attempt, 1);
    assert!(job.duration_ms.is_some_and(|ms| ms >= 700), "{job:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_past_the_bound_is_refused_and_changes_nothing() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (tx, rx) = oneshot::channel();
    let tx = Arc::new(std::sync::Mutex::new(Some(tx)));
    let mut workers = Workers::new();
    workers.register(FnWorker::new(move |ctx, _: Flaky| {
        let tx = tx.clone();
        async move {
            let refused = ctx.extend(Duration::MAX).await;
            if let Some(tx) = tx.lock().ok().and_then(|mut tx| tx.take()) {
                let _ = tx.send(refused.map_err(|e| e.to_string()));
            }
            Ok(())
        }
    }));
    let id = insert(&db, flaky(3).with_timeout(Duration::from_secs(30))).await?;
    let handle = start(&db, workers, config(QUEUE, 2)).await;
    wait_for(&db, QUEUE, Duration::from_secs(10), |s| s.completed == 1).await?;
    handle.shutdown().await;
    let refused = rx.await?;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.contains("lease extension") && e.contains("too long")),
        "{refused:?}"
    );
    let job = get(&db, id).await?;
    assert!(job.errors.is_empty(), "{:?}", job.errors);
    assert_eq!(job.attempt, 1);
    assert_eq!(job.timeout_ms, 30_000, "{job:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_timeout_longer_than_the_jobs_keeps_it_leased() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let mut workers = Workers::new();
    workers.register(
        FnWorker::new(move |_ctx, _: Flaky| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move {
                tokio::time::sleep(Duration::from_millis(700)).await;
                Ok(())
            }
        })
        .with_timeout(Duration::from_secs(10)),
    );
    // Stored with a 200 ms timeout; the worker's own 10 s overrides it.
    let id = insert(&db, flaky(3).with_timeout(Duration::from_millis(200))).await?;
    let handle = start(&db, workers, config(QUEUE, 2)).await;
    wait_for(&db, QUEUE, Duration::from_secs(10), |s| s.completed == 1).await?;
    handle.shutdown().await;
    let job = get(&db, id).await?;
    assert!(job.errors.is_empty(), "{:?}", job.errors);
    assert_eq!((job.attempt, runs.load(Ordering::SeqCst)), (1, 1));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_error_fails_the_job_at_once() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let mut workers = Workers::new();
    workers.register(FnWorker::new(move |_ctx, _: Flaky| {
        counter.fetch_add(1, Ordering::SeqCst);
        async { Err(JobError::permanent("the recipient does not exist")) }
    }));
    let id = insert(&db, flaky(5)).await?;
    let handle = start(&db, workers, config(QUEUE, 2)).await;
    wait_for(&db, QUEUE, Duration::from_secs(10), |s| s.failed == 1).await?;
    handle.shutdown().await;
    let job = get(&db, id).await?;
    assert_eq!(job.state, JobState::Failed);
    assert_eq!(job.errors.len(), 1);
    assert_eq!(job.errors[0].error, "the recipient does not exist");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "not retried");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snoozed_job_runs_again_without_using_an_attempt() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let mut workers = Workers::new();
    workers.register(FnWorker::new(|ctx, _: Flaky| async move {
        if ctx.lease().attempt == 1 {
            return Err(JobError::snooze(Duration::from_millis(20)));
        }
        assert_eq!(ctx.attempt(), 1, "the snooze did not count");
        Ok(())
    }));
    let id = insert(&db, flaky(1)).await?;
    let handle = start(&db, workers, config(QUEUE, 2)).await;
    wait_for(&db, QUEUE, Duration::from_secs(10), |s| s.completed == 1).await?;
    handle.shutdown().await;
    let job = get(&db, id).await?;
    assert_eq!((job.attempt, job.uncounted), (2, 1));
    assert!(job.errors.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_kinds_and_undecodable_args_fail_with_a_clear_error() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let mut workers = Workers::new();
    workers.register(FnWorker::new(|_ctx, _: Flaky| async { Ok(()) }));
    let mystery = insert(&db, NewJob::new("mystery", json!({})).with_max_attempts(1)).await?;
    let retried = insert(&db, NewJob::new("mystery", json!({})).with_max_attempts(5)).await?;
    let garbled = insert(
        &db,
        NewJob::new(Flaky::KIND, json!({ "n": "not a number" })),
    )
    .await?;
    let fine = insert(&db, flaky(1)).await?;
    let handle = start(&db, workers, config(QUEUE, 4)).await;
    wait_for(&db, QUEUE, Duration::from_secs(10), |s| {
        s.completed == 1 && s.failed == 2 && s.scheduled == 1
    })
    .await?;
    handle.shutdown().await;

    assert_eq!(get(&db, fine).await?.state, JobState::Completed);
    for id in [mystery, retried] {
        let job = get(&db, id).await?;
        assert_eq!(
            job.errors.len(),
            1,
            "one failed attempt, not silently burned"
        );
        let error = &job.errors[0].error;
        assert!(error.contains("no worker for kind"), "{error}");
        assert!(error.contains("mystery"), "{error}");
    }
    assert_eq!(get(&db, mystery).await?.state, JobState::Failed);
    assert_eq!(
        get(&db, retried).await?.state,
        JobState::Scheduled,
        "retried later: a node that knows the kind may take it"
    );
    let job = get(&db, garbled).await?;
    assert_eq!(job.state, JobState::Failed, "bad args are permanent");
    assert!(
        job.errors[0].error.contains("do not decode"),
        "{:?}",
        job.errors
    );
    Ok(())
}
