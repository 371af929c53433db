//! A worker process killed with SIGKILL while it holds running jobs: another node runs them
//! again within 2 s, long before their 30 s leases expire, on PostgreSQL (the node's
//! advisory lock goes with its session) and on SQLite (its lock file goes with the
//! process). Ten kills per backend; the median and the worst are printed, and
//! docs/reliability.md keeps the figures.
//!
//! Each round: `hopper worker` (a separate process, concurrency 4) claims the round's 4
//! jobs, each a sleep of a minute; a runtime in this test serves the same queue; the worker
//! is killed; the time until this runtime has started all 4 again is one sample.
//!
//! The same through `hopper serve`: the worker and the other node are remote workers of one
//! server (heartbeat 5 s, so the silence sweep would take 15 s), and the server ends the
//! killed worker's session when it finds its connection closed.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{Hopper, TempDir};
use hopper::backend::Backend;
use hopper::testing::TestDatabase;
use hopper::{
    Client, JobArgs, JobContext, JobError, JobListParams, JobState, NewJob, RemoteBackend,
    RemoteOptions, Runtime, RuntimeConfig, SqliteBackend, SqliteOptions, Worker, Workers,
};
use serde::{Deserialize, Serialize};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::time::Instant;

const ROUNDS: usize = 10;
const JOBS: usize = 4;
/// Every sample must be under this; the median under [`MEDIAN_BOUND`].
const WORST_BOUND: Duration = Duration::from_secs(5);
const MEDIAN_BOUND: Duration = Duration::from_secs(2);

/// The bench job's arguments, as `hopper worker` runs them.
#[derive(Debug, Serialize, Deserialize)]
struct Bench {
    n: u64,
}

impl JobArgs for Bench {
    const KIND: &'static str = "bench";
}

/// Says when each job starts here, then holds it (the round ends before it would finish).
struct Rerun(mpsc::UnboundedSender<Instant>);

#[async_trait::async_trait]
impl Worker for Rerun {
    type Args = Bench;

    async fn process(&self, _ctx: &JobContext, _args: Bench) -> Result<(), JobError> {
        let _ = self.0.send(Instant::now());
        Ok(())
    }
}

/// `hopper worker` on `queue`: 4 at once, each job a minute long.
fn worker(db_args: &[String], queue: &str) -> std::io::Result<Child> {
    Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args(db_args)
        .args(["worker", "--queue", queue, "--concurrency", "4"])
        .args(["--work-ms", "60000"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
}

/// The other node's server, when it is a remote worker, and what the history of a re-run
/// job says.
struct Other {
    endpoint: Option<String>,
    reason: &'static str,
}

/// Runs the rounds on `backend` (what `db_args` point the worker process at, and the other
/// node's too unless `other` says); the samples, sorted.
async fn rounds(
    backend: Arc<dyn Backend>,
    db_args: &[String],
    other: Option<Other>,
) -> anyhow::Result<Vec<Duration>> {
    let other = other.unwrap_or(Other {
        endpoint: None,
        reason: "vanished",
    });
    let client = Client::new(backend.clone());
    let mut samples = Vec::new();
    for round in 0..ROUNDS {
        let queue = format!("death{round}");
        let jobs: Vec<NewJob> = (0..JOBS as u64)
            .map(|n| NewJob::new("bench", serde_json::json!({ "n": n })).with_queue(&queue))
            .collect();
        client.insert_many(&jobs).await?;
        let mut child = worker(db_args, &queue)?;
        let held = wait_until(&client, &queue, Duration::from_secs(20), |running| {
            running == JOBS
        })
        .await;
        if let Err(e) = held {
            child.kill().await?;
            let output = child.wait_with_output().await?;
            anyhow::bail!(
                "round {round}: the worker never held its jobs: {e}\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        // The other node: serves the queue, runs its rescuer.
        let other_backend: Arc<dyn Backend> = match &other.endpoint {
            Some(endpoint) => Arc::new(RemoteBackend::connect(RemoteOptions::new(endpoint)).await?),
            None => backend.clone(),
        };
        let kill = async {
            child.kill().await?; // SIGKILL, then reaps it
            Ok(())
        };
        let sample = rerun_after(&client, other_backend, &queue, other.reason, kill).await?;
        samples.push(sample);
    }
    samples.sort();
    Ok(samples)
}

/// Starts a runtime on `other` that serves `queue` (a remote one says bye when it stops:
/// each round connects anew), then `kill`s the node holding the round's jobs; answers how
/// long after the kill the last of them started again there, once each job's history says
/// `reason`.
async fn rerun_after(
    client: &Client,
    other: Arc<dyn Backend>,
    queue: &str,
    reason: &str,
    kill: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<Duration> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut workers = Workers::new();
    workers.register(Rerun(tx));
    let config = RuntimeConfig::default()
        .with_queues([queue])
        .with_concurrency(JOBS);
    let rerunner = Runtime::new(other, workers, config).start().await?;

    let killed = Instant::now();
    kill.await?;
    let mut last = killed;
    for _ in 0..JOBS {
        last = tokio::time::timeout(WORST_BOUND * 2, rx.recv())
            .await
            .map_err(|_| anyhow::anyhow!("{queue}: the jobs did not run again"))?
            .ok_or_else(|| anyhow::anyhow!("the runtime stopped"))?;
    }
    rerunner.shutdown().await;

    // A remote worker's outcomes are written after they are acknowledged.
    wait_for_jobs(client, queue, |jobs| {
        jobs.iter().all(|j| j.state == JobState::Completed)
    })
    .await?;
    for job in round_jobs(client, queue).await? {
        assert_eq!(job.attempt, 2, "{job:?}");
        assert!(
            job.errors[0].error.contains(reason),
            "released as {reason:?}: {:?}",
            job.errors
        );
    }
    Ok(last - killed)
}

async fn round_jobs(client: &Client, queue: &str) -> hopper::Result<Vec<hopper::JobRecord>> {
    client
        .jobs(&JobListParams {
            queue: Some(queue.to_owned()),
            limit: 100,
            ..JobListParams::default()
        })
        .await
}

/// Waits until `done(number of running jobs of queue)`.
async fn wait_until(
    client: &Client,
    queue: &str,
    limit: Duration,
    done: impl Fn(usize) -> bool,
) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        let jobs = round_jobs(client, queue).await?;
        let running = jobs.iter().filter(|j| j.state == JobState::Running).count();
        if done(running) {
            return Ok(());
        }
        anyhow::ensure!(start.elapsed() < limit, "{running} running after {limit:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (up to 10 s) until `done(the jobs of queue)`.
async fn wait_for_jobs(
    client: &Client,
    queue: &str,
    done: impl Fn(&[hopper::JobRecord]) -> bool,
) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        let jobs = round_jobs(client, queue).await?;
        if done(&jobs) {
            return Ok(());
        }
        anyhow::ensure!(start.elapsed() < Duration::from_secs(10), "{jobs:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn check(backend: &str, samples: &[Duration]) {
    let median = samples[samples.len() / 2];
    let worst = samples[samples.len() - 1];
    println!(
        "{backend}: a killed worker's jobs ran again after {:?} (median of {}), worst {worst:?}; all: {samples:?}",
        median,
        samples.len()
    );
    assert!(median <= MEDIAN_BOUND, "{backend}: median {median:?}");
    assert!(worst <= WORST_BOUND, "{backend}: worst {worst:?}");
}

#[tokio::test]
async fn postgres_a_killed_workers_jobs_run_again_within_two_seconds() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let args = vec![
        "--database-url".to_owned(),
        db.url().to_owned(),
        "--schema".to_owned(),
        db.schema().to_owned(),
    ];
    let samples = rounds(db.backend(), &args, None).await?;
    check("postgres", &samples);
    Ok(())
}

#[tokio::test]
async fn sqlite_a_killed_workers_jobs_run_again_within_two_seconds() -> anyhow::Result<()> {
    let dir = TempDir::new("death")?;
    let path = dir.0.join("jobs.db");
    let backend = SqliteBackend::open(&path, SqliteOptions::default()).await?;
    backend.migrate().await?;
    let args = vec![
        "--database-url".to_owned(),
        format!("sqlite://{}", path.display()),
    ];
    let samples = rounds(Arc::new(backend), &args, None).await?;
    check("sqlite", &samples);
    Ok(())
}

/// A `hopper serve` child process on a free loopback port, killed on drop.
struct Serve {
    hopper: Hopper,
    endpoint: String,
}

/// Starts `hopper serve` (no auth, loopback, its own node id) on `db`, and reads its output
/// until it says where it listens.
fn serve(db: &TestDatabase) -> anyhow::Result<Serve> {
    let node = uuid::Uuid::now_v7().to_string();
    let args = [
        "serve",
        "--listen",
        "tcp://127.0.0.1:0",
        "--insecure-no-auth",
        "--node-id",
        &node,
    ];
    let hopper = Hopper::start(db, "", &args)?;
    let line = hopper.line_with("hopper serve: listening on ", Duration::from_secs(30))?;
    let endpoint = crate::common::serve_endpoint(&line)?;
    Ok(Serve { hopper, endpoint })
}

#[tokio::test]
async fn remote_a_killed_workers_jobs_run_again_within_two_seconds() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = serve(&db)?;
    let args = vec!["--database-url".to_owned(), server.endpoint.clone()];
    let other = Other {
        endpoint: Some(server.endpoint.clone()),
        reason: "connection closed",
    };
    let samples = rounds(db.backend(), &args, Some(other)).await?;
    check("remote", &samples);
    Ok(())
}

/// `hopper serve` killed with SIGKILL while its remote worker runs 4 jobs: another server's
/// rescuer finds the killed server's liveness lock free and releases them, and its own
/// remote worker runs them again. Ten kills; the median and the worst are printed.
#[tokio::test]
async fn serve_killed_its_jobs_run_again_within_two_seconds() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = Client::new(db.backend());
    let survivor = serve(&db)?;
    let mut samples = Vec::new();
    for round in 0..ROUNDS {
        let queue = format!("serve{round}");
        let jobs: Vec<NewJob> = (0..JOBS as u64)
            .map(|n| NewJob::new("bench", serde_json::json!({ "n": n })).with_queue(&queue))
            .collect();
        client.insert_many(&jobs).await?;
        let mut doomed = serve(&db)?;
        let _worker = worker(
            &["--database-url".to_owned(), doomed.endpoint.clone()],
            &queue,
        )?;
        wait_until(&client, &queue, Duration::from_secs(20), |running| {
            running == JOBS
        })
        .await?;
        let remote = RemoteBackend::connect(RemoteOptions::new(&survivor.endpoint)).await?;
        let kill = async {
            doomed.hopper.child.kill()?; // SIGKILL
            doomed.hopper.child.wait()?;
            Ok(())
        };
        samples.push(rerun_after(&client, Arc::new(remote), &queue, "vanished", kill).await?);
    }
    samples.sort();
    check("serve", &samples);
    Ok(())
}
