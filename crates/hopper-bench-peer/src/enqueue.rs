//! The producing commands: `bulk` (W1), `single` (W2) and `enqueue-paced` (W4's load).

use std::time::Duration;

use anyhow::Context;
use hopper::{Client, NewJob};
use tokio::time::Instant;

use crate::worker::KIND;

/// Job number `n`, with `t` (epoch ms) for W4.
fn job(n: u64, t: Option<f64>) -> NewJob {
    let args = match t {
        Some(t) => serde_json::json!({ "n": n, "t": t }),
        None => serde_json::json!({ "n": n }),
    };
    NewJob::new(KIND, args)
}

/// W1: `jobs` jobs, `batch` (at least 1) per [`Client::insert_many`] call (one binary COPY each).
pub async fn bulk(client: &Client, jobs: u64, batch: u64) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut n = 0;
    while n < jobs {
        let end = (n + batch).min(jobs);
        let chunk: Vec<NewJob> = (n..end).map(|i| job(i, None)).collect();
        client
            .insert_many(&chunk)
            .await
            .with_context(|| format!("bulk insert of jobs {n}..{end}"))?;
        n = end;
    }
    let seconds = started.elapsed().as_secs_f64();
    println!("API Client::insert_many (one binary COPY per call), {batch} per call");
    println!("ELAPSED_S {seconds}");
    Ok(())
}

/// W2: `jobs` jobs, one [`Client::insert`] at a time.
pub async fn single(client: &Client, jobs: u64) -> anyhow::Result<()> {
    let started = Instant::now();
    for i in 0..jobs {
        client
            .insert(job(i, None))
            .await
            .with_context(|| format!("insert of job {i}"))?;
    }
    println!("ELAPSED_S {}", started.elapsed().as_secs_f64());
    Ok(())
}

/// W4's load: `jobs` jobs one at a time, job `i` due `i / rate` (at least 1) seconds after the start,
/// each carrying the time just before its insert.
pub async fn paced(client: &Client, jobs: u64, rate: u64) -> anyhow::Result<()> {
    let started = Instant::now();
    for i in 0..jobs {
        let due = Duration::from_secs_f64(i as f64 / rate as f64);
        tokio::time::sleep_until(started + due).await;
        client
            .insert(job(i, Some(crate::now_ms())))
            .await
            .with_context(|| format!("insert of job {i}"))?;
    }
    println!("ELAPSED_S {}", started.elapsed().as_secs_f64());
    Ok(())
}
