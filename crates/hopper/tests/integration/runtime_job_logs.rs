//! Per-job logs from a handler through the runtime: what `JobContext::log` writes is
//! stored with the attempt, a flood is truncated (never an error that stops the job), and
//! the handler sees the job's metadata.

use std::time::Duration;

use hopper::testing::TestDatabase;
use hopper::{
    JobArgs, JobContext, JobError, JobState, LogLevel, NewJob, Runtime, RuntimeConfig, Worker,
    Workers,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, json};

#[derive(Serialize, Deserialize)]
struct Chatty {
    lines: u32,
}

impl JobArgs for Chatty {
    const KIND: &'static str = "chatty";
}

struct ChattyWorker;

#[async_trait::async_trait]
impl Worker for ChattyWorker {
    type Args = Chatty;
    async fn process(&self, ctx: &JobContext, args: Chatty) -> Result<(), JobError> {
        let mut fields = Map::new();
        fields.insert("tenant".into(), ctx.meta()["tenant"].clone());
        ctx.log(LogLevel::Info, "started", fields);
        for i in 0..args.lines {
            ctx.log(
                LogLevel::Debug,
                format!("row {i} {}", "x".repeat(100)),
                Map::new(),
            );
        }
        ctx.log(LogLevel::Warn, "done", Map::new());
        Ok(())
    }
}

/// Runs `workers` on `db` until `completed` jobs of the default queue completed.
async fn run_until_completed(
    db: &TestDatabase,
    workers: Workers,
    completed: i64,
) -> anyhow::Result<()> {
    let handle = Runtime::new(db.backend(), workers, RuntimeConfig::default())
        .start()
        .await?;
    db.wait_for("default", Duration::from_secs(30), |s| {
        s.completed == completed
    })
    .await
    .map_err(anyhow::Error::msg)?;
    handle.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn handler_logs_are_stored_with_the_attempt_and_a_flood_is_truncated() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = hopper::Client::new(db.backend());
    let quiet = NewJob::of(&Chatty { lines: 2 })?.with_meta_entry("tenant", "acme");
    let flood = NewJob::of(&Chatty { lines: 50_000 })?;
    client.insert_many(&[quiet.clone(), flood.clone()]).await?;
    let mut workers = Workers::new();
    workers.register(ChattyWorker);
    run_until_completed(&db, workers, 2).await?;

    let logs = client.job_logs(quiet.id).await?;
    assert_eq!(logs.len(), 1);
    let messages: Vec<&str> = logs[0].lines.iter().map(|l| l.message.as_str()).collect();
    assert_eq!(messages.len(), 4);
    assert_eq!((messages[0], messages[3]), ("started", "done"));
    assert_eq!(logs[0].lines[0].fields["tenant"], json!("acme"));
    assert_eq!(logs[0].lines[3].level, LogLevel::Warn);
    assert_eq!(logs[0].dropped, 0);

    let job = client
        .job(flood.id)
        .await?
        .expect("the flooding job exists");
    assert_eq!(
        job.state,
        JobState::Completed,
        "a log flood never fails a job"
    );
    let logs = client.job_logs(flood.id).await?;
    assert_eq!(logs.len(), 1);
    assert!(logs[0].dropped > 0, "the flood is truncated");
    assert_eq!(logs[0].lines.len() as i64 + logs[0].dropped, 50_002);
    assert_eq!(logs[0].lines[0].message, "started");
    Ok(())
}

/// Logs `lines` numbered lines, enough (about 100 bytes each) for stores mid-run.
struct Numbered;

#[derive(Serialize, Deserialize)]
struct Lines {
    lines: u32,
}

impl JobArgs for Lines {
    const KIND: &'static str = "numbered";
}

#[async_trait::async_trait]
impl Worker for Numbered {
    type Args = Lines;
    async fn process(&self, ctx: &JobContext, args: Lines) -> Result<(), JobError> {
        for i in 0..args.lines {
            ctx.log(
                LogLevel::Info,
                format!("line {i} {}", "x".repeat(90)),
                Map::new(),
            );
            if i % 50 == 49 {
                tokio::task::yield_now().await;
            }
        }
        Ok(())
    }
}

/// Runs one [`Numbered`] job of `lines` lines on `db` to completion; returns its id.
async fn run_numbered(db: &TestDatabase, lines: u32) -> anyhow::Result<hopper::JobId> {
    let client = hopper::Client::new(db.backend());
    let id = client.insert(NewJob::of(&Lines { lines })?).await?;
    let mut workers = Workers::new();
    workers.register(Numbered);
    run_until_completed(db, workers, 1).await?;
    Ok(id)
}

/// The messages stored for the job's only attempt.
async fn stored(db: &TestDatabase, id: hopper::JobId) -> anyhow::Result<Vec<String>> {
    let logs = hopper::Client::new(db.backend()).job_logs(id).await?;
    Ok(logs
        .into_iter()
        .flat_map(|l| l.lines.into_iter().map(|line| line.message))
        .collect())
}

/// Stores that fail for a transient reason (serialization failures, SQLSTATE 40001) are
/// tried again: every line is stored, in order, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_stores_that_fail_for_a_while_are_retried_in_order() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    db.fail_log_stores(3, "40001").await?;
    let id = run_numbered(&db, 300).await?;
    let expected: Vec<String> = (0..300)
        .map(|i| format!("line {i} {}", "x".repeat(90)))
        .collect();
    assert_eq!(
        stored(&db, id).await?,
        expected,
        "every line, in order, once"
    );
    let attempts = db.log_store_attempts().await?;
    assert!(
        attempts > 3,
        "the 3 failed stores were tried again ({attempts})"
    );
    Ok(())
}

/// A store refused for good (a trigger's exception, SQLSTATE P0001) is given up at once,
/// not tried again until the bound, and the job completes.
#[tokio::test]
async fn a_log_store_refused_for_good_is_not_retried() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    db.fail_log_stores(u64::MAX, "P0001").await?;
    let started = std::time::Instant::now();
    let id = run_numbered(&db, 3).await?;
    assert!(stored(&db, id).await?.is_empty(), "the lines are refused");
    assert_eq!(db.log_store_attempts().await?, 1, "one try, no retry");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    Ok(())
}

/// Logs a line, says so, waits to be let go, then logs another and returns.
struct Gated {
    reached: std::sync::Arc<tokio::sync::Notify>,
    go: std::sync::Arc<tokio::sync::Notify>,
}

#[derive(Serialize, Deserialize)]
struct Gate {}

impl JobArgs for Gate {
    const KIND: &'static str = "gated";
}

#[async_trait::async_trait]
impl Worker for Gated {
    type Args = Gate;
    async fn process(&self, ctx: &JobContext, _: Gate) -> Result<(), JobError> {
        ctx.log(LogLevel::Info, "before", Map::new());
        self.reached.notify_one();
        self.go.notified().await;
        ctx.log(LogLevel::Info, "after", Map::new());
        Ok(())
    }
}

/// A job row held by another transaction (as a DELETE or `SELECT … FOR UPDATE` holds it)
/// when the attempt's lines are stored: the store does not wait on it, it is tried again
/// (each try a statement that ends), and once the row is free every line is stored, in
/// order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_store_whose_job_is_held_elsewhere_is_tried_again() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    db.fail_log_stores(0, "P0001").await?;
    let client = hopper::Client::new(db.backend());
    let id = client.insert(NewJob::of(&Gate {})?).await?;
    let gated = Gated {
        reached: Default::default(),
        go: Default::default(),
    };
    let (reached, go) = (gated.reached.clone(), gated.go.clone());
    let mut workers = Workers::new();
    workers.register(gated);
    let handle = Runtime::new(db.backend(), workers, RuntimeConfig::default())
        .start()
        .await?;
    reached.notified().await;

    let (holder, conn) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM {}.jobs WHERE id = '{id}' FOR UPDATE",
            db.schema()
        ))
        .await?;
    let before = db.log_store_attempts().await?;
    go.notify_one();
    // A store waiting on the lock would be one statement that never ends: two more mean
    // the store came back and was tried again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(4);
    while db.log_store_attempts().await? < before + 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the store was not tried again while the job was held"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    holder.batch_execute("COMMIT").await?;
    db.wait_for("default", Duration::from_secs(30), |s| s.completed == 1)
        .await
        .map_err(anyhow::Error::msg)?;
    handle.shutdown().await;
    assert_eq!(stored(&db, id).await?, ["before", "after"]);
    Ok(())
}
