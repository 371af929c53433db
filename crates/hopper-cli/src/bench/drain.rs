//! W3: run a worker until no unfinished bench job is left in the database.
//!
//! The jobs may come from anyone: W1 of the same run, another process, or a drain that was
//! killed (its jobs come back when their leases expire, `--job-timeout` bounds that). The
//! time runs from just before the runtime starts until the database counts none
//! unfinished, polled every [`POLL`]; the graceful shutdown after that is not timed.

use std::time::{Duration, Instant};

use anyhow::Context;
use hopper::{Runtime, RuntimeConfig};

use super::job::BenchWorker;
use super::report::progress;
use super::{Bench, QUEUE, Report, db};
use crate::outage;

/// How often the drain counts unfinished jobs.
pub const POLL: Duration = Duration::from_millis(50);

/// How often a visible progress bar is updated.
const COUNT_EVERY: Duration = Duration::from_millis(500);

/// The runtime every workload runs: the bench queue, `--concurrency`, and a lease of
/// `--job-timeout` when given, so a killed run's jobs come back that soon.
pub fn runtime_config(bench: &Bench) -> RuntimeConfig {
    let defaults = RuntimeConfig::default();
    let lease = bench.job_timeout.unwrap_or(defaults.lease);
    let prefetch = bench.tuning.prefetch.or(defaults.prefetch);
    let claims_in_flight = (bench.tuning.claims_in_flight).unwrap_or(defaults.claims_in_flight);
    defaults
        .with_queues([QUEUE])
        .with_concurrency(bench.concurrency)
        .with_lease(lease)
        .with_node_name(format!("hopper-bench:{}", std::process::id()))
        .with_prefetch(prefetch)
        .with_claims_in_flight(claims_in_flight)
}

/// Runs W3 and reports the jobs that were unfinished at its start over the time taken.
pub async fn run(bench: &Bench) -> anyhow::Result<Report> {
    let jobs = unfinished(bench).await?;
    let bar = progress(jobs, "W3 drain", bench.json);
    let config = runtime_config(bench);
    // The workers of `hopper worker`: with traces exported, each attempt continues the
    // trace its enqueue stored, as in production.
    let mut workers = crate::telemetry::workers();
    workers.register(BenchWorker {
        work: bench.work,
        timeout: bench.job_timeout,
        latencies: None,
        log_lines: bench.log_lines,
    });
    let runtime = Runtime::new(bench.client.backend().clone(), workers, config.clone());
    let started = Instant::now();
    let handle = runtime.start().await.context("starting the runtime")?;
    let waited = wait_until_drained(bench, jobs, &bar).await;
    let seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    handle.shutdown().await;
    waited?;
    let mut report = Report::new("drain", "W3", jobs, seconds);
    report.ran_with(&config);
    Ok(report)
}

/// Polls until no bench job is unfinished. A visible progress bar is moved by a count,
/// taken less often: counting reads the whole backlog, the poll only its first entry.
pub(super) async fn wait_until_drained(
    bench: &Bench,
    jobs: u64,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<()> {
    let mut counted = Instant::now();
    // The runtime rides through a database restart; so does the poll.
    let any_unfinished = || db::any_unfinished(&bench.client);
    let looking = "looking for unfinished jobs";
    while outage::retry_if(looking, outage::is_transient, any_unfinished).await? {
        if !bar.is_hidden() && counted.elapsed() >= COUNT_EVERY {
            let left = unfinished(bench).await?;
            bar.set_position(jobs.saturating_sub(left));
            counted = Instant::now();
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// The bench jobs unfinished, read through a database restart; an error waiting will not
/// cure (a schema never migrated) ends the drain at once.
async fn unfinished(bench: &Bench) -> anyhow::Result<u64> {
    let counting = "counting unfinished jobs";
    outage::retry_if(counting, outage::is_transient, || {
        db::unfinished(&bench.client)
    })
    .await
}
