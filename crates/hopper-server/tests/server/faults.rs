//! Faults through the server: a remote worker killed with SIGKILL mid-job, and the server
//! itself crashing and coming back mid-run. Every job still completes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use hopper::testing::TestDatabase;
use hopper::{JobArgs, JobContext, JobError, NewJob, Runtime, RuntimeConfig, Worker, Workers};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Nap {
    ms: u64,
}

impl JobArgs for Nap {
    const KIND: &'static str = "nap";
}

/// Sleeps `ms`, counting runs per job.
struct Napper {
    runs: Arc<Mutex<HashMap<uuid::Uuid, u32>>>,
}

#[async_trait::async_trait]
impl Worker for Napper {
    type Args = Nap;
    async fn process(&self, ctx: &JobContext, args: Nap) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(args.ms)).await;
        *self
            .runs
            .lock()
            .map_err(|_| JobError::retry("poisoned"))?
            .entry(ctx.id())
            .or_default() += 1;
        Ok(())
    }
}

async fn remote_runtime(
    url: &str,
    concurrency: usize,
    napper: Napper,
) -> anyhow::Result<hopper::RuntimeHandle> {
    let backend = hopper::connect(url, Default::default()).await?;
    let mut workers = Workers::new();
    workers.register(napper);
    let config = RuntimeConfig::default().with_concurrency(concurrency);
    Ok(Runtime::new(backend, workers, config).start().await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_worker_jobs_complete_elsewhere() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_millis(300)).await).await;
    let url = url(server.endpoint());
    let client = hopper::Client::new(db.backend());
    let jobs: Vec<NewJob> = (0..20)
        .map(|_| NewJob::of(&Nap { ms: 10 }))
        .collect::<Result<_, _>>()?;
    client.insert_many(&jobs).await?;

    // A remote worker of five slots whose jobs sleep an hour.
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hopper-stuck-worker"))
        .arg(&url)
        .stdout(std::process::Stdio::null())
        .spawn()?;
    // Five running and, before any job has finished, twice as many held ahead of its slots
    // (the prefetch a remote runtime announces; the server's floor).
    let held = db
        .wait_for("default", Duration::from_secs(60), |s| s.running == 15)
        .await;
    child.kill()?; // SIGKILL
    child.wait()?;
    held.map_err(anyhow::Error::msg)?;

    let runs = Arc::new(Mutex::new(HashMap::new()));
    let napper = Napper { runs: runs.clone() };
    let handle = remote_runtime(&url, 5, napper).await?;
    let stats = db
        .wait_for("default", Duration::from_secs(30), |s| s.completed == 20)
        .await
        .map_err(anyhow::Error::msg)?;
    handle.shutdown().await;
    assert_eq!(stats.completed, 20);
    let silent = client
        .jobs(&hopper::JobListParams {
            limit: 100,
            ..Default::default()
        })
        .await?
        .iter()
        .filter(|j| {
            j.errors
                .iter()
                .any(|e| e.error.contains("connection closed") || e.error.contains("went silent"))
        })
        .count();
    // Fifteen at least: the killed worker's, started or held, retried when the server found
    // its connection closed. (More only if a loaded machine stalled the child for three
    // heartbeat periods before the kill: the silence path, which says "went silent".)
    assert!(
        silent >= 15,
        "the killed worker's jobs were retried: {silent}"
    );
    server.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn server_restart_mid_run_loses_nothing() -> anyhow::Result<()> {
    const JOBS: i64 = 3000;
    let db = TestDatabase::new().await?;
    // The default 30 s lease: orders lost on the wire come back because the restarted
    // server releases inherited leases no worker claims, not because leases expire.
    let mut config = config(&db, Duration::from_millis(300)).await;
    let server = start(config.clone()).await;
    // The restarted server listens where the first one did, as the same node.
    config.listen = server.endpoint().to_owned();
    let url = url(server.endpoint());
    let client = hopper::Client::new(db.backend());
    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|_| NewJob::of(&Nap { ms: 2 }))
        .collect::<Result<_, _>>()?;
    client.insert_many(&jobs).await?;

    let runs = Arc::new(Mutex::new(HashMap::new()));
    let mut handles = Vec::new();
    for _ in 0..2 {
        let napper = Napper { runs: runs.clone() };
        handles.push(remote_runtime(&url, 8, napper).await?);
    }
    db.wait_for("default", Duration::from_secs(60), |s| s.completed >= 500)
        .await
        .map_err(anyhow::Error::msg)?;
    server.abort();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let server = start(config).await;
    let stats = db
        .wait_for("default", Duration::from_secs(25), |s| s.completed == JOBS)
        .await
        .map_err(anyhow::Error::msg)?;
    for h in handles {
        h.shutdown().await;
    }
    let runs = runs
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    let repeats: u32 = runs.values().map(|n| n - 1).sum();
    println!(
        "server restarted mid-run: {JOBS} jobs completed, {repeats} ran twice (at-least-once)"
    );
    assert_eq!(stats.completed, JOBS);
    assert_eq!(runs.len() as i64, JOBS);
    server.shutdown().await;
    Ok(())
}
