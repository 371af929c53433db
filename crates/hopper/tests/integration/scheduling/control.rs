//! Pause and resume, cancellation across nodes, periodic jobs.

use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use hopper::backend::Backend;
use hopper::testing::TestDatabase;
use hopper::{
    Client, JobArgs, JobContext, JobError, JobListParams, NewJob, PeriodicJob, Runtime, TestClock,
    Worker, Workers,
};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use super::common::{Log, config, node, probe, start};

/// Pausing stops claims on every node within a second; resuming restarts them.
#[tokio::test]
async fn pause_stops_claims_within_a_second_and_resume_restarts_them() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let log = Log::default();
    let a = start(&db, &log, config(&["ctl"], 4)).await?;
    let b = start(&db, &log, config(&["ctl"], 4)).await?;
    let admin = Client::new(node(&db).await?);
    admin.insert(probe("ctl", "before", 0)).await?;
    log.wait_until(Duration::from_secs(10), |r| r.len() == 1)
        .await?;

    admin.pause("ctl").await?;
    let paused_at = Instant::now();
    // Keep enqueueing for 1.5 s after the pause, one job every 10 ms.
    while paused_at.elapsed() < Duration::from_millis(1500) {
        admin.insert(probe("ctl", "during", 0)).await?;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let late: Vec<_> = log
        .runs()
        .into_iter()
        .filter(|r| r.started > paused_at + Duration::from_secs(1))
        .collect();
    println!(
        "runs after the pause: {} (none later than 1 s)",
        log.len() - 1
    );
    assert!(
        late.is_empty(),
        "{} jobs started over 1 s after the pause",
        late.len()
    );
    let waiting = db.queue_stats("ctl").await?.available;
    assert!(waiting >= 10, "only {waiting} jobs waited");

    let resumed_at = Instant::now();
    admin.resume("ctl").await?;
    log.wait_until(Duration::from_secs(1), |runs| {
        runs.iter().any(|r| r.started > resumed_at)
    })
    .await?;
    db.wait_for("ctl", Duration::from_secs(30), |s| s.available == 0)
        .await
        .map_err(anyhow::Error::msg)?;
    a.shutdown().await;
    b.shutdown().await;
    Ok(())
}

#[derive(Serialize, Deserialize)]
struct Wait {}

impl JobArgs for Wait {
    const KIND: &'static str = "wait";
}

/// Runs until cancelled, then says so.
struct Waiter {
    started: Arc<tokio::sync::Notify>,
    cancelled: Arc<tokio::sync::Notify>,
}

#[async_trait::async_trait]
impl Worker for Waiter {
    type Args = Wait;
    async fn process(&self, ctx: &JobContext, _args: Wait) -> Result<(), JobError> {
        self.started.notify_one();
        tokio::select! {
            _ = ctx.cancellation().cancelled() => {
                self.cancelled.notify_one();
                Err(JobError::permanent("cancelled"))
            }
            _ = tokio::time::sleep(Duration::from_secs(60)) => Ok(()),
        }
    }
}

/// Cancelling a running job from another node reaches its handler (by NOTIFY) at once.
#[tokio::test]
async fn cancel_reaches_a_handler_on_another_node() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let started = Arc::new(tokio::sync::Notify::new());
    let cancelled = Arc::new(tokio::sync::Notify::new());
    let mut workers = Workers::new();
    workers.register(Waiter {
        started: started.clone(),
        cancelled: cancelled.clone(),
    });
    let runner = Runtime::new(node(&db).await?, workers, config(&["default"], 2))
        .start()
        .await?;
    // The other node: its own backend, pool and listener, with a runtime of its own.
    let other_log = Log::default();
    let other = start(&db, &other_log, config(&["elsewhere"], 2)).await?;
    let other_client = Client::new(node(&db).await?);

    let id = other_client.insert(NewJob::of(&Wait {})?).await?;
    tokio::time::timeout(Duration::from_secs(10), started.notified()).await?;
    let record = other_client.cancel(id).await?;
    assert_eq!(record.state, hopper::JobState::Cancelled);
    tokio::time::timeout(Duration::from_secs(2), cancelled.notified()).await?;
    runner.shutdown().await;
    other.shutdown().await;
    Ok(())
}

/// Two runtimes registering the same schedule enqueue each tick once, on the injected
/// clock: nothing before the first tick, one job per tick however many runtimes run, and
/// after a gap only the latest missed tick.
#[tokio::test]
async fn periodic_ticks_are_enqueued_once_across_runtimes() -> anyhow::Result<()> {
    let at = |h: u32, m: u32, s: u32| {
        Utc.with_ymd_and_hms(2031, 1, 1, h, m, s)
            .single()
            .expect("a valid instant")
    };
    let clock = TestClock::new(at(0, 0, 30));
    let db = TestDatabase::with_clock(Arc::new(clock.clone())).await?;
    let every_minute =
        || PeriodicJob::new("tick", "0 * * * * *", probe("cron", "tick", 0)).expect("valid");
    let mut handles = Vec::new();
    for _ in 0..2 {
        let mut workers = Workers::new();
        workers.register(NoopProbe);
        let backend: Arc<dyn Backend> =
            Arc::new(db.backend_with_clock(Arc::new(clock.clone())).await?);
        let config = config(&["other"], 1).with_clock(Arc::new(clock.clone()));
        handles.push(
            Runtime::new(backend, workers, config)
                .periodic(every_minute())
                .start()
                .await?,
        );
    }
    let client = Client::new(db.backend());
    let next_run = || async {
        let entries = client.cron_jobs().await?;
        anyhow::Ok(entries.first().map(|e| (e.schedule.clone(), e.next_run_at)))
    };
    wait_until(|| async { Ok(next_run().await?.is_some()) }).await?;
    assert_eq!(
        next_run().await?,
        Some(("0 * * * * *".to_owned(), at(0, 1, 0)))
    );
    assert_eq!(db.queue_stats("cron").await?.available, 0, "enqueued early");

    clock.set(at(0, 1, 0));
    wait_until(|| async { Ok(next_run().await?.map(|n| n.1) == Some(at(0, 2, 0))) }).await?;
    clock.set(at(0, 3, 30));
    wait_until(|| async { Ok(next_run().await?.map(|n| n.1) == Some(at(0, 4, 0))) }).await?;
    for handle in handles {
        handle.shutdown().await;
    }

    let jobs = client
        .jobs(&JobListParams {
            queue: Some("cron".into()),
            limit: 1000,
            ..JobListParams::default()
        })
        .await?;
    let mut ticks: Vec<_> = jobs.iter().map(|j| j.run_at).collect();
    ticks.sort();
    assert_eq!(
        ticks,
        vec![at(0, 1, 0), at(0, 3, 0)],
        "one job per tick, the latest after a gap"
    );
    Ok(())
}

/// Polls `done` every 10 ms until it holds, for at most 10 s.
async fn wait_until<F, Fut>(done: F) -> anyhow::Result<()>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let started = Instant::now();
    while !done().await? {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(10),
            "condition not met within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// Registered so the cron test's runtimes have a worker; the ticks land on a queue they
/// do not serve, so they stay in the table to be counted.
struct NoopProbe;

#[async_trait::async_trait]
impl Worker for NoopProbe {
    type Args = super::common::Probe;
    async fn process(&self, _ctx: &JobContext, _args: Self::Args) -> Result<(), JobError> {
        Ok(())
    }
}

/// The SQL API: enqueue with a group and a unique key, pause and resume a queue.
#[tokio::test]
async fn sql_api_enqueues_unique_jobs_and_pauses_queues() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let conn = db.pg().pool().get().await?;
    let s = db.schema();
    let enqueue = format!(
        "SELECT {s}.enqueue('sql', '{{}}', queue => 'sqlq', group_key => 'acme', unique_key => 'once')"
    );
    let first: uuid::Uuid = conn.query_one(enqueue.as_str(), &[]).await?.get(0);
    let second: uuid::Uuid = conn.query_one(enqueue.as_str(), &[]).await?.get(0);
    assert_eq!(first, second);
    conn.batch_execute(&format!("SELECT {s}.pause_queue('sqlq')"))
        .await?;
    let client = Client::new(db.backend());
    let queues = client.queues().await?;
    assert!(
        queues
            .iter()
            .any(|q| q.queue == "sqlq" && q.paused && q.grouped)
    );
    conn.batch_execute(&format!("SELECT {s}.resume_queue('sqlq')"))
        .await?;
    assert!(client.queues().await?.iter().all(|q| !q.paused));
    Ok(())
}
