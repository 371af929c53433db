//! W6: a soak. One runtime (W3's) serves the bench queue while a producer in the same
//! process enqueues at a steady rate — `--rate`, or 70% of a W3 drain measured first —
//! for `--duration` (default 10 minutes). The figure is the drift: how much the rate of
//! job starts in the last half differs from the first half (target ≤ 10%).
//!
//! The producer enqueues every [`TICK`] as many jobs as the schedule has fallen due
//! (`insert_many`, at most 1,000 per call), each carrying its enqueue time, so the report
//! also gives enqueue→start latency per half: a queue that keeps up with the rate shows
//! no drift in starts, and a slowing one shows it first in latency and in the backlog
//! left at the end. Finished jobs stay in the table (the default 24 h retention), as in
//! a deployment: the table grows by every job of the soak, and autovacuum runs meanwhile.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use hopper::NewJob;
use serde::Serialize;
use tokio::time::Instant;

use super::counting::{self, Starts};
use super::enqueue::BATCH;
use super::job::{BenchJob, now_us};
use super::report::Latency;
use super::{Bench, db, drain, enqueue};

/// How often the producer enqueues what has fallen due.
pub const TICK: Duration = Duration::from_millis(100);

/// The share of the W3 rate a soak runs at when no `--rate` is given.
pub const SHARE_OF_W3: f64 = 0.7;

/// One half of the soak.
#[derive(Debug, Clone, Serialize)]
pub struct Half {
    /// Jobs enqueued per second.
    pub enqueued_per_sec: f64,
    /// Jobs started per second.
    pub started_per_sec: f64,
    /// Enqueue→start latency of the jobs started in this half.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub latency: Option<Latency>,
}

/// W6's report.
#[derive(Debug, Clone, Serialize)]
pub struct Soak {
    /// Always `soak`.
    pub workload: &'static str,
    /// Always `W6`.
    pub id: &'static str,
    /// Worker concurrency.
    pub concurrency: usize,
    /// The rate asked for, jobs/s.
    pub rate: f64,
    /// The W3 rate it was derived from, when measured here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub w3_jobs_per_sec: Option<f64>,
    /// Length of the soak.
    pub seconds: f64,
    /// The first half.
    pub first: Half,
    /// The last half.
    pub last: Half,
    /// `|last.started − first.started| / first.started`.
    pub drift: f64,
    /// Jobs started in each whole minute (per second).
    pub started_per_sec_by_minute: Vec<f64>,
    /// Bench jobs left unfinished when the producer stopped.
    pub backlog_at_end: u64,
    /// `/proc/loadavg` at the start and at the end (1, 5, 15 minutes).
    pub load_average: [Option<String>; 2],
}

/// Runs W6 for `duration` at `rate` jobs/s, or at [`SHARE_OF_W3`] of a W3 drain of
/// 100,000 jobs measured first (and printed).
pub async fn run(bench: &Bench, duration: Duration, rate: Option<f64>) -> anyhow::Result<Soak> {
    super::clear(bench).await?;
    let (rate, w3) = match rate {
        Some(rate) => (rate, None),
        None => {
            bench.print(&enqueue::bulk(bench, 100_000).await?);
            db::vacuum(&bench.client).await?;
            let w3 = drain::run(bench).await?;
            bench.print(&w3);
            super::clear(bench).await?;
            (w3.jobs_per_sec * SHARE_OF_W3, Some(w3.jobs_per_sec))
        }
    };
    if !(rate.is_finite() && rate > 0.0) {
        anyhow::bail!("the soak's rate must be positive (got {rate})");
    }
    db::vacuum(&bench.client).await?;
    let load_start = load_average();

    let starts = Arc::new(Starts::new(Vec::new(), 0, true));
    let handle = counting::start(bench, &starts).await?;
    let produced = produce(bench, &starts, duration, rate).await;
    let backlog = db::unfinished(&bench.client).await;
    let load_end = load_average();
    handle.shutdown().await;
    let enqueued = produced?;
    let backlog_at_end = backlog?;
    super::clear(bench).await?;

    let seconds = duration.as_secs_f64();
    let samples = starts.take_latencies();
    let first = half(&samples, &enqueued, 0.0, seconds / 2.0);
    let last = half(&samples, &enqueued, seconds / 2.0, seconds);
    let drift = if first.started_per_sec > 0.0 {
        (last.started_per_sec - first.started_per_sec).abs() / first.started_per_sec
    } else {
        f64::INFINITY
    };
    let minutes = (seconds / 60.0).floor() as usize;
    let started_per_sec_by_minute = (0..minutes)
        .map(|m| {
            let (from, to) = (m as f32 * 60.0, (m + 1) as f32 * 60.0);
            let n = samples.iter().filter(|(at, _)| *at >= from && *at < to);
            n.count() as f64 / 60.0
        })
        .collect();
    Ok(Soak {
        workload: "soak",
        id: "W6",
        concurrency: bench.concurrency,
        rate,
        w3_jobs_per_sec: w3,
        seconds,
        first,
        last,
        drift,
        started_per_sec_by_minute,
        backlog_at_end,
        load_average: [load_start, load_end],
    })
}

/// Prints W6's report as text or one JSON line.
pub fn print(bench: &Bench, r: &Soak) {
    counting::print(bench, r, || text(r));
}

fn text(r: &Soak) {
    println!(
        "W6 soak          {:.0} s at {:.0} jobs/s (concurrency {}): drift {:.1}%, {} unfinished at the end",
        r.seconds,
        r.rate,
        r.concurrency,
        r.drift * 100.0,
        r.backlog_at_end
    );
    for (name, h) in [("first half", &r.first), ("last half ", &r.last)] {
        let latency = h.latency.map_or_else(String::new, |l| {
            format!(
                ", latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
                l.p50_ms, l.p99_ms, l.max_ms
            )
        });
        println!(
            "W6 soak          {name}: enqueued {:.0}/s, started {:.0}/s{latency}",
            h.enqueued_per_sec, h.started_per_sec
        );
    }
}

/// Enqueues at `rate` for `duration`; returns `(seconds since the start, jobs)` of each
/// insert.
async fn produce(
    bench: &Bench,
    starts: &Starts,
    duration: Duration,
    rate: f64,
) -> anyhow::Result<Vec<(f32, u64)>> {
    // The producer's clock is the counter's, so both halves are cut at the same moments.
    let origin = Instant::from_std(starts.origin());
    let end = origin + duration;
    let mut inserts = Vec::new();
    let mut enqueued = 0u64;
    let mut next = origin;
    while next < end {
        tokio::time::sleep_until(next).await;
        next += TICK;
        let elapsed = origin.elapsed().min(duration).as_secs_f64();
        let due = (elapsed * rate) as u64;
        while enqueued < due {
            let n = (due - enqueued).min(BATCH);
            let t = now_us();
            let batch: Vec<NewJob> = (enqueued..enqueued + n)
                .map(|i| BenchJob::new_job(i, Some(t)))
                .collect();
            bench
                .client
                .insert_many(&batch)
                .await
                .with_context(|| format!("W6: enqueueing jobs {enqueued}.."))?;
            inserts.push((origin.elapsed().as_secs_f32(), n));
            enqueued += n;
        }
    }
    Ok(inserts)
}

/// The figures of the part of the soak from `from` to `to` seconds.
fn half(samples: &[(f32, f32)], inserts: &[(f32, u64)], from: f64, to: f64) -> Half {
    let (from32, to32) = (from as f32, to as f32);
    let mut latencies: Vec<f64> = samples
        .iter()
        .filter(|(at, _)| *at >= from32 && *at < to32)
        .map(|&(_, ms)| f64::from(ms))
        .collect();
    let enqueued: u64 = inserts
        .iter()
        .filter(|(at, _)| *at >= from32 && *at < to32)
        .map(|&(_, n)| n)
        .sum();
    let span = (to - from).max(f64::EPSILON);
    Half {
        enqueued_per_sec: enqueued as f64 / span,
        started_per_sec: latencies.len() as f64 / span,
        latency: Latency::of(&mut latencies),
    }
}

/// The 1-, 5- and 15-minute load averages, where the system tells them (Linux).
fn load_average() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(
        text.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    )
}
