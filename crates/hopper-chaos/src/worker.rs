//! One worker process of a chaos run: a hopper [`Runtime`] on the database (direct) or
//! through `hopper serve` (remote), whose handler records every run in `chaos.executions`.
//!
//! The run is recorded when the handler starts, on a connection of its own and in its own
//! transaction, not with [`hopper::JobContext::complete_in`] in the completion's
//! transaction: the point is to count the runs that never complete (the worker was killed,
//! the lease was lost), which a record committed with the completion would hide. Remote
//! workers cannot complete in a transaction anyway (they hold no database connection for
//! the queue; this process's recording pool is the harness's, not hopper's).

use std::time::Duration;

use clap::Args;
use hopper::{JobArgs, JobContext, JobError, PgOptions, Runtime, RuntimeConfig, Worker, Workers};
use serde::{Deserialize, Serialize};

/// The job every chaos run enqueues.
#[derive(Debug, Serialize, Deserialize)]
pub struct ChaosJob {
    /// Its place in the run's sequence.
    pub seq: u64,
}

impl JobArgs for ChaosJob {
    const KIND: &'static str = "chaos";
}

/// `hopper-chaos worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Where to record runs: the run's database.
    #[arg(long)]
    pub record_url: String,
    /// What to run jobs from: the run's database (postgres://) or a server (tcp://…?token=).
    #[arg(long)]
    pub backend: String,
    /// This worker's name in the records.
    #[arg(long)]
    pub name: String,
    /// Jobs run at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Shortest handler time (ms).
    #[arg(long, default_value_t = 5)]
    pub work_min_ms: u64,
    /// Longest handler time (ms).
    #[arg(long, default_value_t = 25)]
    pub work_max_ms: u64,
    /// Lease (direct workers; a server grants its own), also the node-dead delay.
    #[arg(long, default_value_t = 5)]
    pub lease_secs: u64,
}

/// Records each run, works a little, succeeds.
struct Recorder {
    pool: deadpool_postgres::Pool,
    name: String,
    work: (u64, u64),
}

#[async_trait::async_trait]
impl Worker for Recorder {
    type Args = ChaosJob;

    async fn process(&self, ctx: &JobContext, _args: ChaosJob) -> Result<(), JobError> {
        let client = self.pool.get().await.map_err(JobError::retry)?;
        let pid = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
        client
            .execute(
                include_str!("sql/record_execution.sql"),
                &[&ctx.id(), &ctx.lease().attempt, &self.name, &pid],
            )
            .await?;
        drop(client);
        let ms = rand::random_range(self.work.0..=self.work.1.max(self.work.0));
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok(())
    }

    /// Retries come back soon: a chaos run's failures are the faults it injects.
    fn backoff(&self, _attempt: i32) -> Duration {
        Duration::from_millis(500)
    }
}

/// Runs until killed (or SIGTERM).
pub async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let pool = crate::db::pool(&args.record_url, args.concurrency)?;
    let options =
        hopper::ConnectOptions::default().with_postgres(PgOptions::default().with_pool_size(4));
    // Started again while the database or the server is down, the process waits for it
    // rather than exiting: an exit is then a crash worth reporting.
    let backend = loop {
        match hopper::connect(&args.backend, options.clone()).await {
            Ok(backend) => break backend,
            Err(e) => {
                tracing::warn!("cannot connect yet: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    let mut workers = Workers::new();
    workers.register(Recorder {
        pool,
        name: args.name.clone(),
        work: (args.work_min_ms, args.work_max_ms),
    });
    let lease = Duration::from_secs(args.lease_secs.max(1));
    let config = RuntimeConfig::default()
        .with_concurrency(args.concurrency)
        .with_lease(lease)
        .with_heartbeat_interval(lease / 5)
        .with_node_dead_after(lease)
        .with_rescue_interval(Duration::from_millis(500))
        .with_poll_interval(Duration::from_millis(500))
        .with_node_name(args.name);
    let runtime = Runtime::new(backend, workers, config);
    runtime.start().await?.run_until_signal().await;
    Ok(())
}
