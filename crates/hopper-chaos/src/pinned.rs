//! `hopper-chaos pinned-xmin`: a steady load, then a snapshot held open (the xmin horizon
//! pinned, so vacuum removes nothing) while the load goes on, then the snapshot released.
//! Target: throughput during the pin at least half of before, and fully back after.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::db::RunDatabase;
use crate::load::{Load, LoadConfig, Sample};

/// `hopper-chaos pinned-xmin`.
#[derive(Debug, Args)]
pub struct PinnedArgs {
    /// Jobs enqueued per second (70% of the measured W3 drain rate is a good choice).
    #[arg(long, default_value_t = 1000)]
    pub rate: u64,
    /// The runtime's concurrency.
    #[arg(long, default_value_t = 50)]
    pub concurrency: usize,
    /// Seconds of load before the pin.
    #[arg(long, default_value_t = 120)]
    pub before_secs: u64,
    /// Seconds the snapshot is held.
    #[arg(long, default_value_t = 300)]
    pub pinned_secs: u64,
    /// Seconds of load after the release.
    #[arg(long, default_value_t = 180)]
    pub after_secs: u64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 10)]
    pub every_secs: u64,
    /// Also write every sample as a JSON line here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Runs it; true if the target is met.
pub async fn run(admin_url: &str, keep: bool, args: PinnedArgs) -> anyhow::Result<bool> {
    let db = RunDatabase::create(admin_url, "pinned").await?;
    println!(
        "pinned xmin: {}/s, concurrency {}, {} s before, {} s pinned, {} s after; database {}",
        args.rate, args.concurrency, args.before_secs, args.pinned_secs, args.after_secs, db.name
    );
    let result = phases(&db, &args).await;
    db.finish(keep).await?;
    let samples = result?;
    if let Some(out) = &args.out {
        crate::soak::write_json_lines(out, &samples)?;
    }
    Ok(summarise(&samples, args.every_secs))
}

async fn phases(db: &RunDatabase, args: &PinnedArgs) -> anyhow::Result<Vec<Sample>> {
    let config = LoadConfig {
        rate: args.rate,
        concurrency: args.concurrency,
        retention: Duration::from_secs(24 * 3600),
        prune_interval: Duration::from_secs(60),
    };
    let mut load = Load::start(&db.url, &config).await?;
    let every = Duration::from_secs(args.every_secs.max(1));
    let mut samples = Vec::new();
    println!("{}", Sample::header());
    sample_for(&mut load, "before", args.before_secs, every, &mut samples).await;

    let pin = crate::db::connect(&db.url).await?;
    pin.batch_execute(include_str!("sql/pin.sql")).await?;
    let xmin: Option<String> = pin
        .query_one(include_str!("sql/pinned_xmin.sql"), &[])
        .await?
        .get(0);
    println!("pinned: xmin {}", xmin.as_deref().unwrap_or("none"));
    sample_for(&mut load, "pinned", args.pinned_secs, every, &mut samples).await;
    pin.batch_execute(include_str!("sql/unpin.sql")).await?;
    println!("released");
    sample_for(&mut load, "after", args.after_secs, every, &mut samples).await;
    load.stop().await;
    Ok(samples)
}

/// Samples every `every` for `secs`, printing each.
pub async fn sample_for(
    load: &mut Load,
    phase: &str,
    secs: u64,
    every: Duration,
    samples: &mut Vec<Sample>,
) {
    let end = tokio::time::Instant::now() + Duration::from_secs(secs);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    while tokio::time::Instant::now() < end {
        tick.tick().await;
        match load.sample(phase).await {
            Ok(sample) => {
                println!("{}", sample.line());
                samples.push(sample);
            }
            Err(e) => eprintln!("sample at {:.0} s failed: {e:#}", load.elapsed()),
        }
    }
}

/// The mean of `f` over the samples.
pub fn mean(samples: &[&Sample], f: impl Fn(&Sample) -> f64) -> f64 {
    let values: Vec<f64> = samples
        .iter()
        .map(|s| f(s))
        .filter(|v| v.is_finite())
        .collect();
    if values.is_empty() {
        return f64::NAN;
    }
    values.iter().sum::<f64>() / values.len() as f64
}

fn summarise(samples: &[Sample], every_secs: u64) -> bool {
    let of =
        |phase: &str| -> Vec<&Sample> { samples.iter().filter(|s| s.phase == phase).collect() };
    // The first sample of the run is the warm-up; the last minute of "after" is "recovered".
    let before: Vec<&Sample> = of("before").into_iter().skip(1).collect();
    let pinned = of("pinned");
    let after = of("after");
    let tail = (60 / every_secs.max(1)).max(1) as usize;
    let recovered: Vec<&Sample> = after.iter().rev().take(tail).copied().collect();
    let rate = |s: &Sample| s.done_per_s;
    let (b, p, r) = (
        mean(&before, rate),
        mean(&pinned, rate),
        mean(&recovered, rate),
    );
    let worst = pinned
        .iter()
        .map(|s| s.done_per_s)
        .fold(f64::INFINITY, f64::min);
    let dead = samples.iter().map(|s| s.dead).max().unwrap_or(0);
    let p99 = |s: &Sample| s.p99_ms;
    let probe = |s: &Sample| s.probe_ms;
    println!(
        "summary: done/s before {b:.0}, pinned {p:.0} ({:.0}%, worst sample {worst:.0}), after (last minute) {r:.0} ({:.0}%)",
        100.0 * p / b,
        100.0 * r / b
    );
    println!(
        "         p99 ms before {:.1}, pinned {:.1}, after {:.1}; claim probe ms before {:.2}, pinned {:.2} (last {:.2}), after {:.2}; dead tuples max {dead}",
        mean(&before, p99),
        mean(&pinned, p99),
        mean(&recovered, p99),
        mean(&before, probe),
        mean(&pinned, probe),
        pinned.last().map_or(f64::NAN, |s| s.probe_ms),
        mean(&recovered, probe),
    );
    let held = p >= 0.5 * b;
    let back = r >= 0.9 * b;
    println!(
        "target: pinned >= 50% of before: {}; recovered (>= 90% of before): {}",
        if held { "met" } else { "NOT met" },
        if back { "yes" } else { "NO" }
    );
    held && back
}
