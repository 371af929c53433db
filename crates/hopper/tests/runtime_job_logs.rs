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

#[tokio::test]
async fn handler_logs_are_stored_with_the_attempt_and_a_flood_is_truncated() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = hopper::Client::new(db.backend());
    let quiet = NewJob::of(&Chatty { lines: 2 })?.with_meta_entry("tenant", "acme");
    let flood = NewJob::of(&Chatty { lines: 50_000 })?;
    client.insert_many(&[quiet.clone(), flood.clone()]).await?;
    let mut workers = Workers::new();
    workers.register(ChattyWorker);
    let handle = Runtime::new(db.backend(), workers, RuntimeConfig::default())
        .start()
        .await?;
    db.wait_for("default", Duration::from_secs(30), |s| s.completed == 2)
        .await
        .map_err(anyhow::Error::msg)?;
    handle.shutdown().await;

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
