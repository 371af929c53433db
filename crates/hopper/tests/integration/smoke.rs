//! A first end-to-end run: enqueue, run, complete.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hopper::testing::TestDatabase;
use hopper::{JobArgs, JobContext, JobError, NewJob, Runtime, RuntimeConfig, Worker, Workers};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Count {
    n: u32,
}

impl JobArgs for Count {
    const KIND: &'static str = "count";
}

struct Counter(Arc<AtomicUsize>);

#[async_trait::async_trait]
impl Worker for Counter {
    type Args = Count;
    async fn process(&self, _ctx: &JobContext, _args: Count) -> Result<(), JobError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn jobs_run_to_completion() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = hopper::Client::new(db.backend());
    let jobs: Vec<NewJob> = (0..1000)
        .map(|n| NewJob::of(&Count { n }).expect("encodes"))
        .collect();
    client.insert_many(&jobs).await?;
    let seen = Arc::new(AtomicUsize::new(0));
    let mut workers = Workers::new();
    workers.register(Counter(seen.clone()));
    let handle = Runtime::new(
        db.backend(),
        workers,
        RuntimeConfig::default().with_concurrency(16),
    )
    .start()
    .await?;
    let stats = db
        .wait_for("default", Duration::from_secs(30), |s| s.completed == 1000)
        .await
        .map_err(anyhow::Error::msg)?;
    handle.shutdown().await;
    assert_eq!(stats.completed, 1000);
    assert_eq!(seen.load(Ordering::SeqCst), 1000);
    Ok(())
}
