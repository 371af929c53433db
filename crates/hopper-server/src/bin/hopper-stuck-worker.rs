//! `hopper-stuck-worker URL`: a remote worker process whose jobs never finish, for fault
//! tests (`tests/faults.rs` starts it and kills it with SIGKILL mid-job). Not for use: it
//! takes five `nap` jobs of the server at `URL` and sleeps an hour on each.

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

#[tokio::main]
async fn main() -> hopper::Result<()> {
    let Some(url) = std::env::args().nth(1) else {
        eprintln!("usage: hopper-stuck-worker URL (a hopper serve endpoint)");
        std::process::exit(2);
    };
    let backend = hopper::connect(&url, Default::default()).await?;
    let mut workers = Workers::new();
    workers.register(Stuck);
    let config = RuntimeConfig::default().with_concurrency(5);
    let _handle = Runtime::new(backend, workers, config).start().await?;
    // Runs until killed, which is what the test does.
    std::future::pending::<()>().await;
    Ok(())
}
