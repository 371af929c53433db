//! A benchmark, not a test: enqueue-to-start latency through the server. A client submits
//! 200 jobs per second for five seconds to one idle remote worker; the worker notes how
//! long each waited, and the percentiles are printed. Run with
//! `cargo bench -p hopper-server --bench latency` (PostgreSQL at `HOPPER_TEST_DATABASE_URL`
//! or 127.0.0.1, as the tests use). Under `cargo test --benches` it only says so and exits.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use hopper::testing::TestDatabase;
use hopper::{JobArgs, JobContext, JobError, NewJob, Runtime, RuntimeConfig, Worker, Workers};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Stamp {
    /// Microseconds since the test's start, when submitted.
    at_us: u64,
}

impl JobArgs for Stamp {
    const KIND: &'static str = "stamp";
}

struct Stamper {
    start: Instant,
    waits: Arc<Mutex<Vec<u64>>>,
}

#[async_trait::async_trait]
impl Worker for Stamper {
    type Args = Stamp;
    async fn process(&self, _ctx: &JobContext, args: Stamp) -> Result<(), JobError> {
        let now = u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.waits
            .lock()
            .map_err(|_| JobError::retry("poisoned"))?
            .push(now.saturating_sub(args.at_us));
        Ok(())
    }
}

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not, and has nothing to
    // check here.
    if !std::env::args().any(|a| a == "--bench") {
        println!("latency: a benchmark; run it with `cargo bench`");
        return Ok(());
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(latency_at_two_hundred_jobs_a_second())
}

async fn latency_at_two_hundred_jobs_a_second() -> anyhow::Result<()> {
    const JOBS: usize = 1000;
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(1)).await).await;
    let url = url(server.endpoint());
    let start = Instant::now();
    let waits = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Workers::new();
    workers.register(Stamper {
        start,
        waits: waits.clone(),
    });
    let backend = hopper::connect(&url, Default::default()).await?;
    let runtime = Runtime::new(backend, workers, RuntimeConfig::default())
        .start()
        .await?;
    let client = hopper::Client::new(hopper::connect(&url, Default::default()).await?);
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    for _ in 0..JOBS {
        tick.tick().await;
        let at_us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        client.insert(NewJob::of(&Stamp { at_us })?).await?;
    }
    db.wait_for("default", Duration::from_secs(60), |s| {
        s.completed == JOBS as i64
    })
    .await
    .map_err(anyhow::Error::msg)?;
    runtime.shutdown().await;
    let mut waits = waits
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    waits.sort_unstable();
    let pct = |p: f64| waits[((waits.len() - 1) as f64 * p) as usize] as f64 / 1000.0;
    println!(
        "submit-to-start through the server at 200 jobs/s: p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        pct(0.5),
        pct(0.95),
        pct(0.99),
        pct(1.0)
    );
    server.shutdown().await;
    Ok(())
}
