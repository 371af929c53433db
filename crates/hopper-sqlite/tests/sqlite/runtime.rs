//! The whole worker runtime (`hopper::Runtime`) on a SQLite file: jobs run exactly once,
//! with one runtime and with two runtimes (two backends, as two processes would have)
//! sharing the file.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::TempDir;
use hopper::backend::Backend;
use hopper::{JobArgs, JobContext, JobError, NewJob, Runtime, RuntimeConfig, Worker, Workers};
use hopper_sqlite::{SqliteBackend, SqliteOptions};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Count {
    n: u32,
}

impl JobArgs for Count {
    const KIND: &'static str = "count";
}

/// Counts how many times each job number ran.
#[derive(Clone, Default)]
struct Counter(Arc<Mutex<HashMap<u32, u32>>>);

#[async_trait::async_trait]
impl Worker for Counter {
    type Args = Count;
    async fn process(&self, _ctx: &JobContext, args: Count) -> Result<(), JobError> {
        *self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(args.n)
            .or_default() += 1;
        Ok(())
    }
}

async fn backend(dir: &TempDir) -> anyhow::Result<Arc<dyn Backend>> {
    let backend = SqliteBackend::open(dir.db(), SqliteOptions::default()).await?;
    backend.migrate().await?;
    Ok(Arc::new(backend))
}

async fn run(jobs: u32, runtimes: usize) -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let client = hopper::Client::new(backend(&dir).await?);
    let batch: Vec<NewJob> = (0..jobs)
        .map(|n| NewJob::of(&Count { n }))
        .collect::<hopper::Result<_>>()?;
    client.insert_many(&batch).await?;

    let counter = Counter::default();
    let started = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..runtimes {
        let mut workers = Workers::new();
        workers.register(counter.clone());
        let config = RuntimeConfig::default()
            .with_concurrency(16)
            .with_claim_batch(50)
            .with_poll_interval(Duration::from_millis(50));
        handles.push(
            Runtime::new(backend(&dir).await?, workers, config)
                .start()
                .await?,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let stats = client.stats().await?;
        let completed = stats.first().map_or(0, |s| s.completed);
        if completed == i64::from(jobs) {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "not done in time: {stats:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = started.elapsed();
    for handle in handles {
        handle.shutdown().await;
    }
    eprintln!(
        "{jobs} jobs on {runtimes} runtime(s): {took:?} ({:.0} jobs/s)",
        f64::from(jobs) / took.as_secs_f64()
    );
    let seen = counter.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(seen.len(), jobs as usize, "every job ran");
    let repeats: Vec<_> = seen.iter().filter(|(_, runs)| **runs != 1).collect();
    assert!(repeats.is_empty(), "jobs run more than once: {repeats:?}");
    let stats = client.stats().await?;
    assert_eq!(stats[0].completed, i64::from(jobs));
    assert_eq!(stats[0].available + stats[0].running + stats[0].failed, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_runtime_completes_2000_jobs_exactly_once() -> anyhow::Result<()> {
    run(2000, 1).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runtimes_on_one_file_complete_2000_jobs_exactly_once() -> anyhow::Result<()> {
    run(2000, 2).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runtimes_enqueue_each_periodic_tick_once() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let client = hopper::Client::new(backend(&dir).await?);
    let counter = Counter::default();
    let mut handles = Vec::new();
    for _ in 0..2 {
        let mut workers = Workers::new();
        workers.register(counter.clone());
        let every_second =
            hopper::PeriodicJob::new("every-second", "* * * * * *", NewJob::of(&Count { n: 0 })?)?;
        let config = RuntimeConfig::default().with_poll_interval(Duration::from_millis(50));
        let runtime = Runtime::new(backend(&dir).await?, workers, config).periodic(every_second);
        handles.push(runtime.start().await?);
    }
    tokio::time::sleep(Duration::from_millis(3500)).await;
    for handle in handles {
        handle.shutdown().await;
    }
    let jobs = client
        .jobs(&hopper::JobListParams {
            limit: 100,
            ..Default::default()
        })
        .await?;
    let mut ticks: Vec<_> = jobs.iter().map(|j| j.run_at).collect();
    ticks.sort();
    let before = ticks.len();
    ticks.dedup();
    assert_eq!(ticks.len(), before, "a tick enqueued twice: {ticks:?}");
    assert!((2..=5).contains(&before), "{before} ticks in 3.5 s");
    let entries = client.backend().cron_list().await?;
    assert_eq!(entries.len(), 1);
    Ok(())
}

/// A handler that moves its lease ten years ahead, says so, and then blocks its thread
/// until let go: deaf to a shutdown.
struct Deaf {
    started: tokio::sync::mpsc::UnboundedSender<()>,
    let_go: Arc<Mutex<std::sync::mpsc::Receiver<()>>>,
}

#[async_trait::async_trait]
impl Worker for Deaf {
    type Args = Count;
    async fn process(&self, ctx: &JobContext, _args: Count) -> Result<(), JobError> {
        ctx.extend(hopper::limits::MAX_DURATION).await?;
        let _ = self.started.send(());
        tokio::task::block_in_place(|| {
            let _ = self.let_go.lock().unwrap_or_else(|e| e.into_inner()).recv();
        });
        Ok(())
    }
}

/// A stopping runtime whose handler does not stop leaves no job running under a node that
/// is gone (its lease ten years ahead): its deregistration releases the job, the attempt
/// counted, and forgets the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_deaf_to_the_shutdown_leaves_no_job_running() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let backend = backend(&dir).await?;
    let id = hopper::Client::new(backend.clone())
        .insert(NewJob::of(&Count { n: 0 })?)
        .await?;
    let (started, mut started_rx) = tokio::sync::mpsc::unbounded_channel();
    let (let_go, let_go_rx) = std::sync::mpsc::channel();
    let mut workers = Workers::new();
    workers.register(Deaf {
        started,
        let_go: Arc::new(Mutex::new(let_go_rx)),
    });
    let handle = Runtime::new(backend.clone(), workers, RuntimeConfig::default())
        .start()
        .await?;
    tokio::time::timeout(Duration::from_secs(10), started_rx.recv()).await?;
    let node = handle.node_id();

    handle.shutdown_within(Duration::from_millis(100)).await;
    let job = backend
        .job_get(&hopper::backend::JobGetParams { id })
        .await?
        .ok_or_else(|| anyhow::anyhow!("job {id} not found"))?;
    hopper_conformance::nodes::ensure_released_by_stop(&job, hopper::JobState::Available, node)?;
    let nodes = backend
        .stats()
        .ok_or_else(|| anyhow::anyhow!("SQLite lists its nodes"))?
        .node_list(&hopper::backend::NodeListParams::first(10))
        .await?;
    assert!(nodes.nodes.is_empty(), "deregistered: {:?}", nodes.nodes);
    drop(let_go);
    Ok(())
}
