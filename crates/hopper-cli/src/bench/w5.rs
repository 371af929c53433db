//! W5: does a large backlog slow claiming? The claim rate of one runtime at the head of a
//! backlog held at 1,000 ready jobs, then at `--backlog` (default 1,000,000), measured the
//! same way; the figure is the ratio (target ≥ 0.9).
//!
//! For each backlog size B:
//!
//! 1. the bench queue is cleared, B jobs are enqueued (`insert_many`, 1,000 per call, not
//!    timed) and the table is `VACUUM ANALYZE`d, as before W3;
//! 2. a runtime (W3's: `--concurrency`, no-op handler) starts. A feeder in the same
//!    process tops the backlog up with [`FEED`] jobs each time the handlers have started
//!    [`FEED`] more, so the queue keeps about B ready jobs whatever the claim rate (the
//!    1,000 case would otherwise run dry in a few tens of milliseconds);
//! 3. the first `--jobs` / 10 starts warm up; the rate is the next `--jobs` (default
//!    100,000) starts over the time between the two marks, taken in the handler.
//!
//! Before the two measured runs, one run at the small backlog warms up (reported as
//! `warmup`): 30,000 claims on a fresh table ran at a third of the rate of the same run
//! repeated (2,700 against 8,000 jobs/s, both at a backlog of 1,000), which would
//! otherwise count against whichever size goes first. Both sizes pay for the same feeder
//! inserts and leave the same finished rows behind, so the only difference is the
//! backlog. The report says how far the feeder fell behind at
//! worst (`feeder_max_lag`): while it is well below B, the queue never ran short.

use std::cell::Cell;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hopper::NewJob;
use serde::Serialize;

use super::counting::{self, Starts};
use super::job::BenchJob;
use super::{Bench, db, enqueue};

/// The small backlog W5 compares against.
pub const SMALL: u64 = 1_000;

/// Jobs the feeder adds per insert (and the starts that trigger one).
pub const FEED: u64 = 200;

/// A measurement gives up when no job started for this long.
const STALL: Duration = Duration::from_secs(60);

/// One backlog size's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Claims {
    /// Ready jobs held in the queue.
    pub backlog: u64,
    /// Starts measured (after the warm-up).
    pub jobs: u64,
    /// Time between the marks.
    pub seconds: f64,
    /// `jobs / seconds`.
    pub jobs_per_sec: f64,
    /// The most starts the feeder had not yet replaced when it woke.
    pub feeder_max_lag: u64,
}

/// W5's report: both sizes and their ratio.
#[derive(Debug, Clone, Serialize)]
pub struct ClaimScale {
    /// Always `claim-scale`.
    pub workload: &'static str,
    /// Always `W5`.
    pub id: &'static str,
    /// Worker concurrency.
    pub concurrency: usize,
    /// The first run, at the [`SMALL`] backlog, not counted.
    pub warmup: Claims,
    /// At the [`SMALL`] backlog.
    pub small: Claims,
    /// At the large backlog.
    pub large: Claims,
    /// `large.jobs_per_sec / small.jobs_per_sec`.
    pub ratio: f64,
}

/// Runs W5: `jobs` measured starts at a backlog of [`SMALL`], then of `backlog`.
pub async fn run(bench: &Bench, jobs: u64, backlog: u64) -> anyhow::Result<ClaimScale> {
    let jobs = jobs.max(10);
    let warmup = at_backlog(bench, SMALL, jobs).await?;
    let small = at_backlog(bench, SMALL, jobs).await?;
    let large = at_backlog(bench, backlog, jobs).await?;
    super::clear(bench).await?;
    let ratio = if small.jobs_per_sec > 0.0 {
        large.jobs_per_sec / small.jobs_per_sec
    } else {
        0.0
    };
    Ok(ClaimScale {
        workload: "claim-scale",
        id: "W5",
        concurrency: bench.concurrency,
        warmup,
        small,
        large,
        ratio,
    })
}

/// Prints W5's report as text or one JSON line.
pub fn print(bench: &Bench, r: &ClaimScale) {
    counting::print(bench, r, || text(r));
}

fn text(r: &ClaimScale) {
    for c in [&r.warmup, &r.small, &r.large] {
        println!(
            "W5 claim-scale   backlog {:>9}: {:>8} jobs in {:>7.3} s  {:>10.0} jobs/s  (concurrency {}, feeder lag ≤ {})",
            c.backlog, c.jobs, c.seconds, c.jobs_per_sec, r.concurrency, c.feeder_max_lag
        );
    }
    println!(
        "W5 claim-scale   ratio {:.3} (backlog {} / {})",
        r.ratio, r.large.backlog, r.small.backlog
    );
}

/// Fills the queue to `backlog` ready jobs and measures `jobs` starts at its head.
async fn at_backlog(bench: &Bench, backlog: u64, jobs: u64) -> anyhow::Result<Claims> {
    super::clear(bench).await?;
    enqueue::bulk(bench, backlog).await?; // not timed here
    db::vacuum(&bench.client).await?;

    let warmup = jobs / 10;
    let starts = Arc::new(Starts::new(vec![warmup.max(1), warmup + jobs], FEED, false));
    let handle = counting::start(bench, &starts).await?;
    let max_lag = Cell::new(0);
    // The feeder only returns on an error; the wait ends the select otherwise.
    let waited = tokio::select! {
        fed = feed(bench, &starts, &max_lag) => fed.map(|never| match never {}),
        r = wait(&starts) => r,
    };
    handle.shutdown().await;
    waited?;
    let (Some(from), Some(to)) = (starts.passed(0), starts.passed(1)) else {
        anyhow::bail!("W5 ended before both marks were passed");
    };
    let seconds = to.duration_since(from).as_secs_f64();
    Ok(Claims {
        backlog,
        jobs,
        seconds,
        jobs_per_sec: if seconds > 0.0 {
            jobs as f64 / seconds
        } else {
            0.0
        },
        feeder_max_lag: max_lag.get(),
    })
}

/// Replaces started jobs, [`FEED`] at a time, until dropped by the caller's select;
/// keeps in `max_lag` the most starts not yet replaced when it looked.
async fn feed(bench: &Bench, starts: &Starts, max_lag: &Cell<u64>) -> anyhow::Result<Infallible> {
    let mut fed = 0u64;
    loop {
        starts.wake.notified().await;
        loop {
            let lag = starts.started().saturating_sub(fed);
            max_lag.set(max_lag.get().max(lag));
            if lag < FEED {
                break;
            }
            let batch: Vec<NewJob> = (0..FEED)
                .map(|i| BenchJob::new_job(fed + i, None))
                .collect();
            bench
                .client
                .insert_many(&batch)
                .await
                .context("W5: topping up the backlog")?;
            fed += FEED;
        }
    }
}

/// Waits until the last mark is passed, failing when starts stop for [`STALL`].
async fn wait(starts: &Starts) -> anyhow::Result<()> {
    loop {
        let before = starts.started();
        tokio::select! {
            _ = starts.done.notified() => return Ok(()),
            _ = tokio::time::sleep(STALL) => {
                if starts.started() == before {
                    anyhow::bail!("W5: no job started for {STALL:?} ({before} so far)");
                }
            }
        }
    }
}
