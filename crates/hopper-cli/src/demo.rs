//! `hopper demo`: clients submit, a runtime works, failures are retried and dead-lettered,
//! all in one process.
//!
//! Migrates, starts a runtime on a queue of the run's own (`demo-` and 12 hex digits), clears
//! the jobs of earlier demo runs that have ended, enqueues jobs 1..=N of a
//! [`worker::DemoWorker`] (100 ms each, priorities high, normal and low in turn, every 12th
//! failing on all of its 3 attempts), runs them with concurrency 50 while a progress bar
//! shows how many have finished, prints a summary read back from the database, and shuts
//! the runtime down gracefully. Its jobs stay until a later run clears them, so they can be
//! looked at (`hopper jobs list --queue demo-…`).
//!
//! Several demos may run at once on one database, each in its own queue: none runs,
//! counts or clears another's jobs. A run clears only the demo queues that no registered
//! node serves, and its own runtime registers (serving its queue) before it enqueues and
//! deregisters only after its summary, so a run still going is never cleared (see
//! [`clear_ended_runs`]).

mod worker;

use std::collections::HashSet;
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

/// The start of every demo run's queue, followed by 12 hex digits of the run's own.
const QUEUE_PREFIX: &str = "demo-";

/// The one queue every demo run shared before runs had their own: cleared like an ended
/// run's when no node serves it.
const SHARED_QUEUE: &str = "demo";

/// Attempts before a demo job is dead-lettered.
const MAX_ATTEMPTS: i32 = 3;

/// Jobs run at once.
const CONCURRENCY: usize = 50;

/// How often the counts are read while the jobs run.
const POLL: Duration = Duration::from_millis(50);

/// Nodes or jobs read at once (the node listing while looking for the queues the nodes
/// serve, the run's jobs when they are added up): the most a server answers.
const PAGE: u32 = 1000;

/// What the demo prints at the end, read back from the database.
#[derive(Debug, Serialize)]
struct Summary {
    /// The run's own queue, where its jobs stay until a later run clears them.
    queue: String,
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
    let queue = run_queue();
    let mut workers = Workers::new();
    let worker = DemoWorker::default();
    let running = worker.running();
    workers.register(worker);
    let config = RuntimeConfig::default()
        .with_queues([queue.as_str()])
        .with_concurrency(CONCURRENCY);
    // Started, and so registered as serving the run's queue, before anything else: other
    // runs leave the queue alone from now on (see `clear_ended_runs`).
    let handle = Runtime::new(backend, workers, config).start().await?;
    let bar = progress_bar(u64::from(args.jobs), json);
    let summary = async {
        clear_ended_runs(&client, &queue).await?;
        let started = Instant::now();
        client.insert_many(&demo_jobs(&queue, args.jobs)?).await?;
        wait_until_finished(&client, &queue, &bar, &running).await?;
        let seconds = started.elapsed().as_secs_f64();
        bar.finish_and_clear();
        // Read before the runtime deregisters, while other runs still leave its jobs be.
        summarize(&client, &queue, seconds).await
    }
    .await;
    bar.finish_and_clear();
    handle.shutdown().await;
    let summary = summary?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_summary(args.jobs, &summary)?;
    }
    Ok(())
}

/// A queue of the run's own: [`QUEUE_PREFIX`] and the last 12 hex digits of a UUIDv7,
/// which are random (48 bits), so that runs started in the same millisecond differ.
fn run_queue() -> String {
    let id = uuid::Uuid::now_v7().simple().to_string();
    format!("{QUEUE_PREFIX}{}", &id[id.len() - 12..])
}

/// Whether `queue` is a demo run's: [`SHARED_QUEUE`], or [`QUEUE_PREFIX`] and 12 lowercase
/// hex digits.
fn is_demo_queue(queue: &str) -> bool {
    queue == SHARED_QUEUE
        || queue.strip_prefix(QUEUE_PREFIX).is_some_and(|id| {
            id.len() == 12 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        })
}

/// Deletes the jobs (all but running ones) of the demo runs that have ended: the demo
/// queues other than `own` that no registered node serves.
///
/// The queues are read before the nodes, and a run registers its node before it enqueues
/// and deregisters it only after its summary: so a queue seen with jobs belongs to a run
/// whose node the later read sees, unless that run has ended. A run killed without
/// deregistering keeps its jobs until its node is released as dead (by any runtime's
/// rescuer) and a later run clears them. On a backend that lists no nodes, nothing is
/// cleared: which runs are over cannot be told.
async fn clear_ended_runs(client: &Client, own: &str) -> anyhow::Result<()> {
    let demo_queues: Vec<String> = client
        .stats()
        .await?
        .into_iter()
        .map(|s| s.queue)
        .filter(|q| q != own && is_demo_queue(q))
        .collect();
    if demo_queues.is_empty() {
        return Ok(());
    }
    let mut served: HashSet<String> = HashSet::new();
    let mut params = hopper::NodeListParams::first(PAGE);
    loop {
        let page = match client.nodes(&params).await {
            Ok(page) => page,
            Err(hopper::Error::Unsupported(_)) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        served.extend(page.nodes.into_iter().flat_map(|n| n.info.queues));
        match page.next_before {
            Some(next) => params.before = Some(next),
            None => break,
        }
    }
    for queue in demo_queues.iter().filter(|q| !served.contains(*q)) {
        client.clear(Some(queue)).await?;
    }
    Ok(())
}

/// Jobs 1..=`count`: priorities high, normal and low in turn.
fn demo_jobs(queue: &str, count: u32) -> anyhow::Result<Vec<NewJob>> {
    (1..=count)
        .map(|n| {
            let priority = match n % 3 {
                0 => Priority::HIGH,
                1 => Priority::NORMAL,
                _ => Priority::LOW,
            };
            Ok(NewJob::of(&DemoJob { n })?
                .with_queue(queue)
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

/// Polls the run's queue's counts until no job is left unfinished, or Ctrl-C. The bar shows
/// the jobs the worker is running (at most [`CONCURRENCY`]), not the database's `running`
/// count, which also holds jobs claimed ahead and waiting for a free slot.
async fn wait_until_finished(
    client: &Client,
    queue: &str,
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
        let s = queue_stats(client, queue).await?;
        bar.set_position(u64::try_from(s.completed + s.failed).unwrap_or(0));
        let now = running.load(Ordering::Relaxed);
        bar.set_message(format!("{now} running, {} failed", s.failed));
        if s.available + s.scheduled + s.running == 0 {
            return Ok(());
        }
    }
}

/// The counts of `queue` (zeros when it has no jobs).
async fn queue_stats(client: &Client, queue: &str) -> anyhow::Result<QueueStats> {
    Ok(client
        .stats()
        .await?
        .into_iter()
        .find(|s| s.queue == queue)
        .unwrap_or_default())
}

/// Reads every job of the run's queue back and adds up what happened to it.
async fn summarize(client: &Client, queue: &str, seconds: f64) -> anyhow::Result<Summary> {
    let mut summary = Summary {
        queue: queue.to_owned(),
        completed: 0,
        failed: 0,
        attempts: 0,
        avg_duration_ms: 0.0,
        seconds: round3(seconds),
        failed_attempts: (i32::MAX, 0),
    };
    let (mut runs, mut total_ms) = (0u64, 0i64);
    let mut params = JobListParams {
        queue: Some(queue.to_owned()),
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
    outln!(
        "demo: {jobs} jobs on queue {:?}, concurrency {CONCURRENCY}",
        s.queue
    );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_run_has_a_demo_queue_of_its_own_and_users_queues_are_not_demos() {
        let (a, b) = (run_queue(), run_queue());
        assert_ne!(a, b);
        for queue in [&a, &b] {
            assert!(is_demo_queue(queue), "{queue}");
            assert!(hopper::core::job::validate_name("queue", queue).is_ok());
        }
        assert!(is_demo_queue("demo"));
        for users in [
            "demo-emails",
            "demo-0123456789AB",
            "demo-0123456789a",
            "demo-0123456789abc",
            "demos",
            "mail",
        ] {
            assert!(!is_demo_queue(users), "{users}");
        }
    }
}
