//! `hopper worker`: a worker process that runs the bench job (a no-op, or a sleep of
//! `--work-ms`, logging `--log-lines` lines) on the configured backend, usually a `hopper serve` server
//! (`--database-url tcp://host:7010`, token in `HOPPER_TOKEN`). `hopper bench --workload
//! server` starts four of these as child processes.
//!
//! It stops on SIGINT or SIGTERM. With `--stdin-control` (as the bench starts it) it
//! prints `ready` once connected, starts its runtime when a line arrives on stdin, and
//! stops when stdin closes, so its parent times the drain from the moment every worker is
//! connected and never leaves a worker behind.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use hopper::backend::Backend;
use hopper::{Runtime, RuntimeConfig};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::bench::{BenchWorker, QUEUE};
use crate::output::outln;

/// `hopper worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The queue to serve.
    #[arg(long, default_value = QUEUE)]
    pub queue: String,
    /// Jobs run at once.
    #[arg(long, default_value_t = 50)]
    pub concurrency: usize,
    /// Each job sleeps this long (ms).
    #[arg(long, default_value_t = 0)]
    pub work_ms: u64,
    /// Lines each job writes to its per-job log.
    #[arg(long, default_value_t = 0)]
    pub log_lines: u32,
    /// Print `ready` when connected, start on a line from stdin, stop when stdin closes.
    #[arg(long, hide = true)]
    pub stdin_control: bool,
}

/// Runs the worker until a signal (or, with `--stdin-control`, until stdin closes).
pub async fn run(backend: Arc<dyn Backend>, args: WorkerArgs) -> anyhow::Result<()> {
    if args.concurrency == 0 {
        let refusal = anyhow::anyhow!("--concurrency must be at least 1");
        return Err(crate::output::invalid_input(refusal));
    }
    crate::open_files::raise();
    let mut workers = crate::telemetry::workers();
    workers.register(BenchWorker {
        work: Duration::from_millis(args.work_ms),
        timeout: None,
        latencies: None,
        log_lines: args.log_lines,
    });
    let config = RuntimeConfig::default()
        .with_queues(vec![args.queue.clone()])
        .with_concurrency(args.concurrency)
        .with_node_name(format!("hopper-worker:{}", std::process::id()));
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    if args.stdin_control {
        outln!("ready");
        // A line means go; end of input means the parent is gone: stop before starting.
        if stdin.next_line().await.context("reading stdin")?.is_none() {
            return Ok(());
        }
    }
    let _gauges = crate::telemetry::queue_gauges(&backend);
    // A database that does not take writes yet (restarting, a standby being promoted) is
    // waited for, as `hopper serve` waits for it.
    let start = || async {
        Runtime::new(backend.clone(), workers.clone(), config.clone())
            .start()
            .await
            .context("starting the runtime")
    };
    let handle =
        crate::outage::retry_if("starting the runtime", crate::outage::is_transient, start).await?;
    let health = handle.health();
    // With --stdin-control, the end of stdin stops the worker as a signal does.
    handle
        .run_until(async {
            if args.stdin_control {
                while let Ok(Some(_)) = stdin.next_line().await {}
            } else {
                std::future::pending::<()>().await;
            }
        })
        .await;
    match health.failure() {
        Some(failure) => anyhow::bail!("stopped unhealthy: {failure}"),
        None => Ok(()),
    }
}
