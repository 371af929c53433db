//! A worker process killed with SIGKILL mid-attempt keeps the log lines it wrote: the
//! runtime stores them while the handler runs (a second after the first of them), not only
//! when it returns. Once the job is rescued, the next attempt's lines go to their own
//! attempt. Both on PostgreSQL directly and through `hopper serve`.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use hopper::testing::TestDatabase;
use hopper::{
    AttemptLog, JobArgs, JobContext, JobError, LogLevel, NewJob, Runtime, RuntimeConfig, Worker,
    Workers,
};
use serde::{Deserialize, Serialize};
use serde_json::Map;

/// The stuck worker's logging job (`src/bin/hopper-stuck-worker.rs`).
#[derive(Serialize, Deserialize)]
struct Chatter {
    lines: u32,
}

impl JobArgs for Chatter {
    const KIND: &'static str = "chatter";
}

/// Runs the next attempt: one line, then done.
struct Finisher;

#[async_trait::async_trait]
impl Worker for Finisher {
    type Args = Chatter;
    async fn process(&self, ctx: &JobContext, _args: Chatter) -> Result<(), JobError> {
        ctx.log(LogLevel::Info, "finished", Map::new());
        Ok(())
    }
}

/// A child process killed (SIGKILL) when dropped, also when a test fails.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A stuck worker process on `url` (in `schema`, for a database URL).
fn stuck_worker(url: &str, schema: Option<&str>) -> std::io::Result<Killed> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hopper-stuck-worker"));
    command.arg(url).stdout(Stdio::null());
    match schema {
        Some(schema) => command.env("HOPPER_SCHEMA", schema),
        None => command.env_remove("HOPPER_SCHEMA"),
    };
    command.spawn().map(Killed)
}

/// Polls the store until attempt 1 of `id` holds `lines` lines, or fails after 30 s.
async fn wait_for_lines(
    client: &hopper::Client,
    id: hopper::JobId,
    lines: usize,
) -> Vec<AttemptLog> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let logs = client.job_logs(id).await.expect("reads the logs");
        if logs.first().is_some_and(|l| l.lines.len() == lines) {
            return logs;
        }
        assert!(
            Instant::now() < deadline,
            "the running attempt's lines were not stored within 30 s: {logs:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Kills the worker once its lines are stored, runs the job's next attempt in this
/// process on `backend`, and checks each attempt's log.
async fn killed_mid_attempt(
    db: &TestDatabase,
    child: Killed,
    backend: Arc<dyn hopper::backend::Backend>,
    config: RuntimeConfig,
    id: hopper::JobId,
) -> anyhow::Result<()> {
    let local = hopper::Client::new(db.backend());
    let before = wait_for_lines(&local, id, 3).await;
    drop(child); // SIGKILL
    assert_eq!(before.len(), 1);
    let messages: Vec<&str> = before[0].lines.iter().map(|l| l.message.as_str()).collect();
    assert_eq!(messages, ["line 0", "line 1", "line 2"]);
    assert_eq!(before[0].attempt, 1);

    let mut workers = Workers::new();
    workers.register(Finisher);
    let handle = Runtime::new(backend, workers, config).start().await?;
    db.wait_for("default", Duration::from_secs(60), |s| s.completed == 1)
        .await
        .map_err(anyhow::Error::msg)?;
    handle.shutdown().await;

    let logs = local.job_logs(id).await?;
    assert_eq!(logs.len(), 2, "{logs:?}");
    assert_eq!(
        logs[0], before[0],
        "the killed attempt's lines are kept as they were"
    );
    assert_eq!(logs[1].attempt, 2);
    let messages: Vec<&str> = logs[1].lines.iter().map(|l| l.message.as_str()).collect();
    assert_eq!(
        messages,
        ["finished"],
        "the next attempt has a log of its own"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_killed_mid_attempt_on_postgres_keeps_its_lines() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let job = NewJob::of(&Chatter { lines: 3 })?;
    hopper::Client::new(db.backend())
        .insert(job.clone())
        .await?;
    let child = stuck_worker(db.url(), Some(db.schema()))?;
    // The killed node's liveness lock is free at once: the rescuer takes its jobs back.
    let config = RuntimeConfig::default().with_rescue_interval(Duration::from_millis(200));
    killed_mid_attempt(&db, child, db.backend(), config, job.id).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_runtime_killed_mid_attempt_keeps_its_lines() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_millis(300)).await).await;
    let url = url(server.endpoint());
    let job = NewJob::of(&Chatter { lines: 3 })?;
    hopper::Client::new(db.backend())
        .insert(job.clone())
        .await?;
    let child = stuck_worker(&url, None)?;
    let backend = hopper::connect(&format!("{url}&name=next"), Default::default()).await?;
    let result = killed_mid_attempt(&db, child, backend, RuntimeConfig::default(), job.id).await;
    server.shutdown().await;
    result
}
