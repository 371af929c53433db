//! W4: enqueue→start latency. An idle runtime waits; jobs are enqueued one at a time at
//! [`RATE`] per second, each carrying its enqueue time; the handler records how long after
//! that it started.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hopper::{Runtime, Workers};
use tokio::time::Instant;

use super::drain::runtime_config;
use super::job::{BenchJob, BenchWorker, Latencies, now_us};
use super::report::{Latency, progress};
use super::{Bench, Report};

/// Jobs enqueued per second.
pub const RATE: u32 = 200;

/// How long the runtime idles before the first job (its first claims find nothing).
const IDLE: Duration = Duration::from_secs(2);

/// How long to wait for the last jobs to start after the last enqueue.
const GRACE: Duration = Duration::from_secs(60);

/// Runs W4 with `jobs` jobs.
pub async fn run(bench: &Bench, jobs: u64) -> anyhow::Result<Report> {
    let latencies = Arc::new(Latencies::default());
    let config = runtime_config(bench);
    let mut workers = Workers::new();
    workers.register(BenchWorker {
        work: bench.work,
        timeout: bench.job_timeout,
        latencies: Some(latencies.clone()),
        log_lines: bench.log_lines,
    });
    let handle = Runtime::new(bench.client.backend().clone(), workers, config.clone())
        .start()
        .await
        .context("starting the runtime")?;
    tokio::time::sleep(IDLE).await;
    let measured = measure(bench, jobs, &latencies).await;
    handle.shutdown().await;
    let seconds = measured?;
    let mut samples = latencies.take();
    let mut report = Report::new("latency", "W4", jobs, seconds);
    report.ran_with(&config);
    report.latency = Latency::of(&mut samples);
    Ok(report)
}

/// Enqueues the jobs at [`RATE`], then waits until each has started. Returns the time the
/// enqueueing took.
async fn measure(bench: &Bench, jobs: u64, latencies: &Latencies) -> anyhow::Result<f64> {
    let bar = progress(jobs, "W4 latency", bench.json);
    let period = Duration::from_secs(1) / RATE;
    let started = Instant::now();
    let mut due = started;
    for i in 0..jobs {
        tokio::time::sleep_until(due).await;
        due += period;
        bench
            .client
            .insert(BenchJob::new_job(i, Some(now_us())))
            .await
            .with_context(|| format!("enqueue of job {i}"))?;
        bar.set_position(latencies.len() as u64);
    }
    let seconds = started.elapsed().as_secs_f64();
    let deadline = Instant::now() + GRACE;
    while (latencies.len() as u64) < jobs {
        bar.set_position(latencies.len() as u64);
        tokio::select! {
            _ = latencies.recorded.notified() => {}
            _ = tokio::time::sleep_until(deadline) => anyhow::bail!(
                "only {} of {jobs} jobs started within {GRACE:?} of the last enqueue",
                latencies.len()
            ),
        }
    }
    bar.finish_and_clear();
    Ok(seconds)
}
