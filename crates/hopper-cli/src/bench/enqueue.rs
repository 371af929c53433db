//! W1 (bulk enqueue) and W2 (one enqueue per call).

use std::time::Instant;

use anyhow::Context;

use super::job::BenchJob;
use super::report::progress;
use super::{Bench, Report};

/// Jobs per [`hopper::Client::insert_many`] call (the workload's definition).
pub const BATCH: u64 = 1_000;

/// W1: `jobs` jobs with args `{"n": i}`, [`BATCH`] per `insert_many` call, one call after
/// the other. The jobs of each call are built inside the timed loop, as a producer would.
pub async fn bulk(bench: &Bench, jobs: u64) -> anyhow::Result<Report> {
    let bar = progress(jobs, "W1 enqueue", bench.json);
    let started = Instant::now();
    let mut n = 0;
    while n < jobs {
        let end = (n + BATCH).min(jobs);
        let batch: Vec<_> = (n..end).map(|i| BenchJob::new_job(i, None)).collect();
        bench
            .client
            .insert_many(&batch)
            .await
            .with_context(|| format!("bulk enqueue of jobs {n}..{end}"))?;
        bar.inc(end - n);
        n = end;
    }
    let seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    Ok(Report::new("enqueue", "W1", jobs, seconds))
}

/// W2: `jobs` jobs, one [`hopper::Client::insert`] at a time, each waiting for the last.
pub async fn single(bench: &Bench, jobs: u64) -> anyhow::Result<Report> {
    let bar = progress(jobs, "W2 single", bench.json);
    let started = Instant::now();
    for i in 0..jobs {
        bench
            .client
            .insert(BenchJob::new_job(i, None))
            .await
            .with_context(|| format!("enqueue of job {i}"))?;
        bar.inc(1);
    }
    let seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    Ok(Report::new("enqueue-single", "W2", jobs, seconds))
}
