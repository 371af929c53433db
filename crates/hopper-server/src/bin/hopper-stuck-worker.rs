//! `hopper-stuck-worker URL`: a worker process whose jobs never finish, for fault tests
//! (`tests/server/faults.rs` and `tests/server/log_flush.rs` start it and kill it with
//! SIGKILL mid-job). Not for use: it takes five `nap` or `chatter` jobs of the server (or
//! database, in the schema `$HOPPER_SCHEMA`) at `URL` and sleeps an hour on each; a
//! `chatter` job first writes `lines` lines to its attempt's log.

use std::time::Duration;

use hopper::{JobArgs, JobContext, JobError, Runtime, RuntimeConfig, Worker, Workers};
use serde::{Deserialize, Serialize};

/// The fault tests' job (its `ms` is ignored here).
#[derive(Serialize, Deserialize)]
struct Nap {
    ms: u64,
}

impl JobArgs for Nap {
    const KIND: &'static str = "nap";
}

/// Sleeps an hour on every job.
struct Stuck;

#[async_trait::async_trait]
impl Worker for Stuck {
    type Args = Nap;
    async fn process(&self, _ctx: &JobContext, _args: Nap) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(())
    }
}

/// Writes `lines` log lines, then sleeps an hour.
#[derive(Serialize, Deserialize)]
struct Chatter {
    lines: u32,
}

impl JobArgs for Chatter {
    const KIND: &'static str = "chatter";
}

/// Logs, then sleeps an hour on every job.
struct Chatty;

#[async_trait::async_trait]
impl Worker for Chatty {
    type Args = Chatter;
    async fn process(&self, ctx: &JobContext, args: Chatter) -> Result<(), JobError> {
        for i in 0..args.lines {
            let mut fields = serde_json::Map::new();
            fields.insert("attempt".into(), ctx.attempt().into());
            ctx.log(hopper::LogLevel::Info, format!("line {i}"), fields);
        }
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(())
    }
}

#[tokio::main]
async fn main() -> hopper::Result<()> {
    let Some(url) = std::env::args().nth(1) else {
        eprintln!("usage: hopper-stuck-worker URL (a hopper serve endpoint)");
        std::process::exit(2);
    };
    let mut options = hopper::ConnectOptions::default();
    if let Ok(schema) = std::env::var("HOPPER_SCHEMA") {
        options.postgres = options.postgres.with_schema(schema);
    }
    let backend = hopper::connect(&url, options).await?;
    let mut workers = Workers::new();
    workers.register(Stuck);
    workers.register(Chatty);
    let config = RuntimeConfig::default().with_concurrency(5);
    let _handle = Runtime::new(backend, workers, config).start().await?;
    // Runs until killed, which is what the test does.
    std::future::pending::<()>().await;
    Ok(())
}
