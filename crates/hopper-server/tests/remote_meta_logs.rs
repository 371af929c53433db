//! A `Runtime` on a `RemoteBackend`: the job's metadata reaches the handler through the
//! server, and what the handler logs is sent as `log` requests and stored with the attempt.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
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

    let meta = Arc::new(Mutex::new(Vec::new()));
    let backend = hopper::connect(&format!("{url}&name=w&kinds=note"), Default::default()).await?;
    let mut workers = Workers::new();
    workers.register(Noter { meta: meta.clone() });
    let handle = Runtime::new(backend, workers, RuntimeConfig::default())
        .start()
        .await?;
    db.wait_for("default", Duration::from_secs(60), |s| s.completed == 2)
        .await
        .map_err(anyhow::Error::msg)?;
    handle.shutdown().await;
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
