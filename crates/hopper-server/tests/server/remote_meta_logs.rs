//! A `Runtime` on a `RemoteBackend`: the job's metadata reaches the handler through the
//! server, and what the handler logs is sent as `log` requests and stored with the attempt;
//! a store the database fails for a while (the server answers it as transient) is sent
//! again, one it refuses for good is not, and one the server answers later than a database
//! store's 5 s window is waited for and sent again, as the Python and Node workers do.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use hopper::testing::TestDatabase;
use hopper::{
    JobArgs, JobContext, JobError, LogLevel, NewJob, Runtime, RuntimeConfig, Worker, Workers,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, json};

#[derive(Serialize, Deserialize)]
struct Note {
    lines: u32,
}

impl JobArgs for Note {
    const KIND: &'static str = "note";
}

struct Noter {
    meta: Arc<Mutex<Vec<serde_json::Value>>>,
}

#[async_trait::async_trait]
impl Worker for Noter {
    type Args = Note;
    async fn process(&self, ctx: &JobContext, args: Note) -> Result<(), JobError> {
        self.meta
            .lock()
            .map_err(|_| JobError::retry("poisoned"))?
            .push(ctx.meta().clone());
        for i in 0..args.lines {
            ctx.log(
                LogLevel::Info,
                format!("note {i} {}", "x".repeat(100)),
                Map::new(),
            );
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_runtime_gets_meta_and_stores_its_logs_through_the_server() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(1)).await).await;
    let url = url(server.endpoint());
    let client = hopper::Client::new(hopper::connect(&url, Default::default()).await?);
    let quiet = NewJob::of(&Note { lines: 2 })?.with_meta_entry("tenant", "acme");
    let flood = NewJob::of(&Note { lines: 5_000 })?;
    client.insert_many(&[quiet.clone(), flood.clone()]).await?;
    let meta = run_noter(&db, &url, 2).await?;
    server.shutdown().await;

    let seen = meta
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    assert!(seen.contains(&json!({"tenant": "acme"})), "{seen:?}");
    assert!(seen.contains(&json!({})), "{seen:?}");
    // The runtime stores an attempt's lines before it reports the outcome, so they are
    // there once the job is completed.
    let local = hopper::Client::new(db.backend());
    let logs = local.job_logs(quiet.id).await?;
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0].lines.len(), 2);
    let logs = local.job_logs(flood.id).await?;
    assert!(logs[0].dropped > 0, "a flood is truncated");
    assert_eq!(logs[0].lines.len() as i64 + logs[0].dropped, 5_000);
    Ok(())
}

/// Runs a remote runtime with a [`Noter`] on the server at `url` until `completed` jobs
/// completed; returns the metadata its handler saw.
async fn run_noter(
    db: &TestDatabase,
    url: &str,
    completed: i64,
) -> anyhow::Result<Arc<Mutex<Vec<serde_json::Value>>>> {
    let meta = Arc::new(Mutex::new(Vec::new()));
    let backend = hopper::connect(&format!("{url}&name=w&kinds=note"), Default::default()).await?;
    let mut workers = Workers::new();
    workers.register(Noter { meta: meta.clone() });
    let handle = Runtime::new(backend, workers, RuntimeConfig::default())
        .start()
        .await?;
    db.wait_for("default", Duration::from_secs(60), |s| {
        s.completed == completed
    })
    .await
    .map_err(anyhow::Error::msg)?;
    handle.shutdown().await;
    Ok(meta)
}

/// A server whose log stores fail as [`TestDatabase::fail_log_stores`] says, and the
/// messages stored for one [`Noter`] job of `lines` lines that a remote runtime ran.
async fn noted_while_failing(
    lines: u32,
    failures: u64,
    sqlstate: &str,
) -> anyhow::Result<(TestDatabase, Vec<String>)> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(1)).await).await;
    db.fail_log_stores(failures, sqlstate).await?;
    let url = url(server.endpoint());
    let client = hopper::Client::new(hopper::connect(&url, Default::default()).await?);
    let id = client.insert(NewJob::of(&Note { lines })?).await?;
    run_noter(&db, &url, 1).await?;
    server.shutdown().await;
    let logs = hopper::Client::new(db.backend()).job_logs(id).await?;
    let stored = logs
        .into_iter()
        .flat_map(|l| l.lines.into_iter().map(|line| line.message))
        .collect();
    Ok((db, stored))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_runtime_sends_again_the_lines_the_database_fails_for_a_while()
-> anyhow::Result<()> {
    let (db, stored) = noted_while_failing(300, 3, "40001").await?;
    let expected: Vec<String> = (0..300)
        .map(|i| format!("note {i} {}", "x".repeat(100)))
        .collect();
    assert_eq!(stored, expected, "every line, in order, once");
    let attempts = db.log_store_attempts().await?;
    assert!(
        attempts > 3,
        "the failed stores were tried again ({attempts})"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_runtime_gives_up_at_once_the_lines_the_database_refuses() -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let (db, stored) = noted_while_failing(3, u64::MAX, "P0001").await?;
    assert!(stored.is_empty(), "the lines are refused");
    assert_eq!(db.log_store_attempts().await?, 1, "one try, no retry");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_runtime_waits_past_five_seconds_for_a_log_reply_and_sends_it_again()
-> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(1)).await).await;
    // The first store that runs fails (transient), so the lines are stored only if the
    // worker is still there to send them again when its reply comes.
    db.fail_log_stores(1, "40001").await?;
    let table = sql(&db).await?;
    table
        .batch_execute(&format!(
            "BEGIN; LOCK TABLE {}.job_logs IN SHARE MODE",
            db.schema()
        ))
        .await?;
    let url = url(server.endpoint());
    let client = hopper::Client::new(hopper::connect(&url, Default::default()).await?);
    let id = client.insert(NewJob::of(&Note { lines: 3 })?).await?;
    let backend = hopper::connect(&format!("{url}&name=w&kinds=note"), Default::default()).await?;
    let mut workers = Workers::new();
    workers.register(Noter {
        meta: Arc::new(Mutex::new(Vec::new())),
    });
    let handle = Runtime::new(backend, workers, RuntimeConfig::default())
        .start()
        .await?;
    // The server's log writer waits on the table: the request is left without a reply.
    db.wait_for_lock_waits(1, Duration::from_secs(30)).await?;
    // The condition under test: no reply for longer than a database store's window.
    tokio::time::sleep(hopper::core::job_log::LOG_STORE_WINDOW + Duration::from_secs(1)).await;
    table.batch_execute("COMMIT").await?;
    db.wait_for("default", Duration::from_secs(60), |s| s.completed == 1)
        .await
        .map_err(anyhow::Error::msg)?;
    handle.shutdown().await;
    server.shutdown().await;

    let local = hopper::Client::new(db.backend());
    let ran = local.job(id).await?.and_then(|job| job.duration_ms);
    assert!(
        ran.is_some_and(|ms| ms < 5_000),
        "the attempt's duration is its handler's, not its log's wait: {ran:?} ms"
    );
    let logs = local.job_logs(id).await?;
    let stored: Vec<String> = logs
        .into_iter()
        .flat_map(|l| l.lines.into_iter().map(|line| line.message))
        .collect();
    let expected: Vec<String> = (0..3)
        .map(|i| format!("note {i} {}", "x".repeat(100)))
        .collect();
    assert_eq!(stored, expected, "every line, in order, once");
    assert_eq!(
        db.log_store_attempts().await?,
        2,
        "the failed store (answered late), then the one sent again"
    );
    Ok(())
}
