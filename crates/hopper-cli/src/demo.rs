//! `hopper demo`: clients submit, a runtime works, failures are retried and dead-lettered,
//! all in one process.
//!
//! Migrates, clears the jobs of earlier demos (they live in their own queue, `demo`),
//! enqueues jobs 1..=N of a [`worker::DemoWorker`] (100 ms each, priorities high, normal
//! and low in turn, every 12th failing on all of its 3 attempts), runs them with
//! concurrency 50 while a progress bar shows how many have finished, shuts the runtime
//! down gracefully, and prints a summary read back from the database.

mod worker;

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hopper::backend::Backend;
use hopper::{
    Client, JobListParams, JobRecord, JobState, NewJob, Priority, QueueStats, Runtime,
    RuntimeConfig, Workers,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use tokio::time::Instant;

use crate::cli::DemoArgs;
use crate::output::outln;
use worker::{DemoJob, DemoWorker};

/// The demo's own queue, so clearing it never touches anyone else's jobs.
const QUEUE: &str = "demo";

/// Attempts before a demo job is dead-lettered.
const MAX_ATTEMPTS: i32 = 3;

/// Jobs run at once.
const CONCURRENCY: usize = 50;

/// How often the counts are read while the jobs run.
const POLL: Duration = Duration::from_millis(50);

/// What the demo prints at the end, read back from the database.
#[derive(Debug, Serialize)]
struct Summary {
    completed: u64,
    failed: u64,
    /// Counted attempts over all demo jobs.
    attempts: u64,
    /// Mean duration of every recorded run, successful or not.
    avg_duration_ms: f64,
    /// From the first enqueue until no demo job was left unfinished.
    seconds: f64,
    #[serde(skip)]
    failed_attempts: (i32, i32),
}

/// Runs the demo.
pub async fn run(backend: Arc<dyn Backend>, args: DemoArgs, json: bool) -> anyhow::Result<()> {
    let client = Client::new(backend.clone());
    client.migrate().await?;
    client.clear(Some(QUEUE)).await?;
    let left = queue_stats(&client).await?;
    if left.running > 0 {
        anyhow::bail!(
            "{} demo jobs of an earlier run are still running; wait until their lease expires \
             (see `hopper jobs list --queue {QUEUE} --state running`) and run the demo again",
            left.running
        );
    }

    let started = Instant::now();
    client.insert_many(&demo_jobs(args.jobs)?).await?;
    let mut workers = Workers::new();
    let worker = DemoWorker::default();
    let running = worker.running();
    workers.register(worker);
    let config = RuntimeConfig::default()
        .with_queues([QUEUE])
        .with_concurrency(CONCURRENCY);
    let handle = Runtime::new(backend, workers, config).start().await?;
    let bar = progress_bar(u64::from(args.jobs), json);
    let waited = wait_until_finished(&client, &bar, &running).await;
    let seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    handle.shutdown().await;
    waited?;

    let summary = summarize(&client, seconds).await?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_summary(args.jobs, &summary)?;
    }
    Ok(())
}

/// Jobs 1..=`count`: priorities high, normal and low in turn.
fn demo_jobs(count: u32) -> anyhow::Result<Vec<NewJob>> {
    (1..=count)
        .map(|n| {
            let priority = match n % 3 {
                0 => Priority::HIGH,
                1 => Priority::NORMAL,
                _ => Priority::LOW,
            };
            Ok(NewJob::of(&DemoJob { n })?
                .with_queue(QUEUE)
                .with_priority(priority)
                .with_max_attempts(MAX_ATTEMPTS))
        })
        .collect()
}

/// A bar of finished/total on stderr; hidden for `--json` and when stderr is not a terminal.
fn progress_bar(total: u64, json: bool) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} finished  {msg}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Polls the demo queue's counts until no job is left unfinished, or Ctrl-C. The bar shows
/// the jobs the worker is running (at most [`CONCURRENCY`]), not the database's `running`
/// count, which also holds jobs claimed ahead and waiting for a free slot.
async fn wait_until_finished(
    client: &Client,
    bar: &ProgressBar,
    running: &AtomicUsize,
) -> anyhow::Result<()> {
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    let mut tick = tokio::time::interval(POLL);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = &mut interrupted => anyhow::bail!("interrupted; the runtime was shut down"),
        }
        let s = queue_stats(client).await?;
        bar.set_position(u64::try_from(s.completed + s.failed).unwrap_or(0));
        let now = running.load(Ordering::Relaxed);
        bar.set_message(format!("{now} running, {} failed", s.failed));
        if s.available + s.scheduled + s.running == 0 {
            return Ok(());
        }
    }
}

/// The demo queue's counts (zeros when it has no jobs).
async fn queue_stats(client: &Client) -> anyhow::Result<QueueStats> {
    Ok(client
        .stats()
        .await?
        .into_iter()
        .find(|s| s.queue == QUEUE)
        .unwrap_or_default())
}

/// Reads every demo job back and adds up what happened to it.
async fn summarize(client: &Client, seconds: f64) -> anyhow::Result<Summary> {
    const PAGE: u32 = 1000;
    let mut summary = Summary {
        completed: 0,
        failed: 0,
        attempts: 0,
        avg_duration_ms: 0.0,
        seconds: round3(seconds),
        failed_attempts: (i32::MAX, 0),
    };
    let (mut runs, mut total_ms) = (0u64, 0i64);
    let mut params = JobListParams {
        queue: Some(QUEUE.to_owned()),
        limit: PAGE,
        ..JobListParams::default()
    };
    loop {
        let page = client.jobs(&params).await?;
        for job in &page {
            add_job(&mut summary, job);
            let durations = job
                .errors
                .iter()
                .filter_map(|e| e.duration_ms)
                .chain(job.duration_ms);
            for ms in durations {
                runs += 1;
                total_ms += ms;
            }
        }
        match page.last() {
            Some(last) if page.len() == PAGE as usize => params.before = Some(last.id),
            _ => break,
        }
    }
    if runs > 0 {
        summary.avg_duration_ms = round3(total_ms as f64 / runs as f64);
    }
    Ok(summary)
}

/// Rounds to three decimals, so the JSON reads as milliseconds (or microseconds), not noise.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn add_job(summary: &mut Summary, job: &JobRecord) {
    let attempts = job.attempt - job.uncounted;
    summary.attempts += u64::try_from(attempts).unwrap_or(0);
    match job.state {
        JobState::Completed => summary.completed += 1,
        JobState::Failed => {
            summary.failed += 1;
            let (low, high) = summary.failed_attempts;
            summary.failed_attempts = (low.min(attempts), high.max(attempts));
        }
        _ => {}
    }
}

fn print_summary(jobs: u32, s: &Summary) -> anyhow::Result<()> {
    let each = match s.failed_attempts {
        (low, high) if low == high => format!("{low} attempts each"),
        (low, high) => format!("{low} to {high} attempts each"),
    };
    outln!("demo: {jobs} jobs on queue {QUEUE:?}, concurrency {CONCURRENCY}");
    outln!("  completed  {}", s.completed);
    if s.failed > 0 {
        outln!("  failed     {} ({each})", s.failed);
    } else {
        outln!("  failed     0");
    }
    outln!("  attempts   {}", s.attempts);
    outln!("  avg run    {:.1} ms", s.avg_duration_ms);
    outln!("  took       {:.2} s", s.seconds);
    Ok(())
}
