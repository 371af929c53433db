//! Four remote workers, each a `Runtime` on a `RemoteBackend`, drain 10,000 jobs through
//! one server: every job runs exactly once (no faults, so no repeats).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use hopper::testing::TestDatabase;
use hopper::{JobArgs, JobContext, JobError, NewJob, Runtime, RuntimeConfig, Worker, Workers};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Tick {
    n: u32,
}

impl JobArgs for Tick {
    const KIND: &'static str = "tick";
}

struct Ticker {
    seen: Arc<Mutex<HashMap<uuid::Uuid, u32>>>,
}

#[async_trait::async_trait]
impl Worker for Ticker {
    type Args = Tick;
    async fn process(&self, ctx: &JobContext, _args: Tick) -> Result<(), JobError> {
        *self
            .seen
            .lock()
            .map_err(|_| JobError::retry("poisoned"))?
            .entry(ctx.id())
            .or_default() += 1;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_remote_workers_drain_ten_thousand_jobs_exactly_once() -> anyhow::Result<()> {
    const JOBS: u32 = 10_000;
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(1)).await).await;
    let url = url(server.endpoint());

    // Submitted through the server too (submit_batch, split by size).
    let client = hopper::Client::new(hopper::connect(&url, Default::default()).await?);
    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|n| NewJob::of(&Tick { n }))
        .collect::<Result<_, _>>()?;
    let submitted = Instant::now();
    client.insert_many(&jobs).await?;
    let submit_secs = submitted.elapsed().as_secs_f64();

    let seen = Arc::new(Mutex::new(HashMap::new()));
    let started = Instant::now();
    let mut handles = Vec::new();
    for i in 0..4 {
        let backend =
            hopper::connect(&format!("{url}&name=w{i}&kinds=tick"), Default::default()).await?;
        let mut workers = Workers::new();
        workers.register(Ticker { seen: seen.clone() });
        let config = RuntimeConfig::default().with_concurrency(32);
        handles.push(Runtime::new(backend, workers, config).start().await?);
    }
    let stats = db
        .wait_for("default", Duration::from_secs(120), |s| {
            s.completed == i64::from(JOBS)
        })
        .await
        .map_err(anyhow::Error::msg)?;
    let secs = started.elapsed().as_secs_f64();
    for h in handles {
        h.shutdown().await;
    }
    println!(
        "submitted {JOBS} jobs through the server in {submit_secs:.2} s; drained by 4 remote workers in {secs:.2} s ({:.0} jobs/s)",
        f64::from(JOBS) / secs
    );
    assert_eq!(stats.completed, i64::from(JOBS));
    assert_eq!(stats.running + stats.available + stats.failed, 0);
    let seen = seen
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    assert_eq!(seen.len(), JOBS as usize, "every job ran");
    assert!(seen.values().all(|&n| n == 1), "no job ran twice");
    server.shutdown().await;
    Ok(())
}
