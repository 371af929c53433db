//! `hopper-chaos soak`: a steady load for a long time (W6). Target: the throughput of the
//! last five minutes within 10% of the first five; table and index sizes recorded, and
//! bounded once the runtime prunes completed jobs past their retention.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::db::RunDatabase;
use crate::load::{Load, LoadConfig, Sample};
use crate::pinned::{mean, sample_for};

/// `hopper-chaos soak`.
#[derive(Debug, Args)]
pub struct SoakArgs {
    /// Jobs enqueued per second: 70% of the W3 drain rate measured first
    /// (`hopper bench --workload drain`).
    #[arg(long)]
    pub rate: u64,
    /// The runtime's concurrency.
    #[arg(long, default_value_t = 50)]
    pub concurrency: usize,
    /// How long (minutes).
    #[arg(long, default_value_t = 30)]
    pub minutes: u64,
    /// How long completed jobs are kept before the runtime prunes them (minutes). Below
    /// the soak's length, so the table reaches its steady size within the run.
    #[arg(long, default_value_t = 5)]
    pub retention_minutes: u64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 30)]
    pub every_secs: u64,
    /// Also write every sample as a JSON line here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Runs it; true if the drift is within 10%.
pub async fn run(admin_url: &str, keep: bool, args: SoakArgs) -> anyhow::Result<bool> {
    let db = RunDatabase::create(admin_url, "soak").await?;
    println!(
        "soak: {}/s for {} min, concurrency {}, completed jobs kept {} min; database {}",
        args.rate, args.minutes, args.concurrency, args.retention_minutes, db.name
    );
    let result = soak(&db, &args).await;
    db.finish(keep).await?;
    let samples = result?;
    if let Some(out) = &args.out {
        write_json_lines(out, &samples)?;
    }
    Ok(summarise(&samples))
}

async fn soak(db: &RunDatabase, args: &SoakArgs) -> anyhow::Result<Vec<Sample>> {
    let config = LoadConfig {
        rate: args.rate,
        concurrency: args.concurrency,
        retention: Duration::from_secs(args.retention_minutes * 60),
        prune_interval: Duration::from_secs(30),
    };
    let mut load = Load::start(&db.url, &config).await?;
    let mut samples = Vec::new();
    println!("{}", Sample::header());
    let every = Duration::from_secs(args.every_secs.max(1));
    sample_for(&mut load, "soak", args.minutes * 60, every, &mut samples).await;
    load.stop().await;
    Ok(samples)
}

fn summarise(samples: &[Sample]) -> bool {
    let end = samples.last().map_or(0.0, |s| s.t);
    let first: Vec<&Sample> = samples.iter().filter(|s| s.t <= 300.0).collect();
    let last: Vec<&Sample> = samples.iter().filter(|s| s.t > end - 300.0).collect();
    let rate = |s: &Sample| s.done_per_s;
    let (a, b) = (mean(&first, rate), mean(&last, rate));
    let drift = (b - a).abs() / a;
    let p99 = |s: &Sample| s.p99_ms;
    println!(
        "summary: done/s first 5 min {a:.0}, last 5 min {b:.0}: drift {:.1}%; p99 ms first {:.1}, last {:.1}",
        100.0 * drift,
        mean(&first, p99),
        mean(&last, p99)
    );
    for minute in [5.0, 10.0, 15.0, 20.0, 25.0, 30.0] {
        if let Some(s) = samples.iter().rev().find(|s| s.t <= minute * 60.0 + 1.0) {
            println!(
                "         at {:>4.1} min: heap {:.1} MB, indexes {:.1} MB (claim index {:.2} MB), live {}, dead {}",
                s.t / 60.0,
                s.heap_mb,
                s.indexes_mb,
                s.claim_index_mb,
                s.live,
                s.dead
            );
        }
    }
    let met = drift <= 0.10;
    println!(
        "target: drift <= 10%: {}",
        if met { "met" } else { "NOT met" }
    );
    met
}

/// Writes the samples as JSON lines.
pub fn write_json_lines(path: &Path, samples: &[Sample]) -> anyhow::Result<()> {
    let mut file =
        std::fs::File::create(path).with_context(|| format!("writing {}", path.display()))?;
    for s in samples {
        serde_json::to_writer(&mut file, s)?;
        writeln!(file)?;
    }
    Ok(())
}
