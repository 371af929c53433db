//! Dispatch by kind: each job goes only to a worker that declared its kind, and a job whose
//! kind no connected worker runs waits (without using attempts) instead of failing.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::*;
use hopper::testing::TestDatabase;
use hopper::{JobContext, JobError, JobState, NewJob, Runtime, RuntimeConfig, Worker, Workers};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct A {}
impl hopper::JobArgs for A {
    const KIND: &'static str = "kind_a";
}

#[derive(Serialize, Deserialize)]
struct B {}
impl hopper::JobArgs for B {
    const KIND: &'static str = "kind_b";
}

type Log = Arc<Mutex<Vec<(String, String)>>>;

struct Recorder<T>(&'static str, Log, std::marker::PhantomData<fn() -> T>);

#[async_trait::async_trait]
impl<T: hopper::JobArgs> Worker for Recorder<T> {
    type Args = T;
    async fn process(&self, ctx: &JobContext, _args: T) -> Result<(), JobError> {
        self.1
            .lock()
            .map_err(|_| JobError::retry("poisoned"))?
            .push((self.0.to_owned(), ctx.kind().to_owned()));
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_go_only_to_workers_of_their_kind() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(1)).await).await;
    let url = url(server.endpoint());
    let client = hopper::Client::new(db.backend());
    let mut jobs = Vec::new();
    for _ in 0..30 {
        jobs.push(NewJob::of(&A {})?);
        jobs.push(NewJob::of(&B {})?);
        jobs.push(NewJob::new("kind_c", serde_json::json!({})));
    }
    client.insert_many(&jobs).await?;

    let log: Log = Arc::default();
    let mut handles = Vec::new();
    for (name, kind) in [("wa", "kind_a"), ("wb", "kind_b")] {
        let backend = hopper::connect(
            &format!("{url}&name={name}&kinds={kind}"),
            Default::default(),
        )
        .await?;
        let mut workers = Workers::new();
        // Each registers both kinds: only its declared kind may reach it.
        workers.register(Recorder::<A>(name, log.clone(), Default::default()));
        workers.register(Recorder::<B>(name, log.clone(), Default::default()));
        let config = RuntimeConfig::default().with_concurrency(4);
        handles.push(Runtime::new(backend, workers, config).start().await?);
    }
    db.wait_for("default", Duration::from_secs(60), |s| s.completed == 60)
        .await
        .map_err(anyhow::Error::msg)?;
    // Give the unplaceable kind time to be claimed and put back a few times.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for h in handles {
        h.shutdown().await;
    }
    let log = log.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
    assert_eq!(log.len(), 60);
    for (worker, kind) in &log {
        let expected = if kind == "kind_a" { "wa" } else { "wb" };
        assert_eq!(worker, expected, "{kind} ran on {worker}");
    }
    let waiting = client
        .jobs(&hopper::JobListParams {
            kind: Some("kind_c".into()),
            limit: 100,
            ..Default::default()
        })
        .await?;
    assert_eq!(waiting.len(), 30);
    for job in waiting {
        assert!(
            matches!(job.state, JobState::Available | JobState::Scheduled),
            "{:?}",
            job.state
        );
        assert_eq!(job.attempt - job.uncounted, 0, "no attempt used");
    }
    server.shutdown().await;
    Ok(())
}
