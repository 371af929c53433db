//! The chaos run's enqueuer: jobs at a steady rate, each batch in one transaction with its
//! `chaos.expected` rows, retried through database restarts without duplicates or gaps.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hopper::{NewJob, PgBackend};

use crate::worker::ChaosJob;

/// Batches per second.
const TICKS_PER_SECOND: u64 = 10;

/// Enqueues `total` jobs at `rate` per second; `enqueued` counts the committed ones.
pub async fn run(
    backend: PgBackend,
    total: u64,
    rate: u64,
    enqueued: Arc<AtomicU64>,
) -> anyhow::Result<()> {
    let per_tick = (rate / TICKS_PER_SECOND).max(1);
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / TICKS_PER_SECOND));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seq = 0u64;
    while seq < total {
        tick.tick().await;
        let n = per_tick.min(total - seq);
        let jobs = (seq..seq + n)
            .map(|seq| {
                NewJob::of(&ChaosJob { seq }).map(|mut job| {
                    // Killed workers burn attempts; the default 25 could dead-letter a job.
                    job.max_attempts = 1000;
                    job
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        insert_surely(&backend, &jobs).await;
        seq += n;
        enqueued.store(seq, Ordering::Relaxed);
    }
    Ok(())
}

/// Inserts the batch, retrying until it is known to be committed.
async fn insert_surely(backend: &PgBackend, jobs: &[NewJob]) {
    let mut logged = false;
    loop {
        match insert(backend, jobs).await {
            Ok(()) => return,
            Err(e) => {
                // The commit may have happened before the error (a restart mid-commit):
                // the batch's first job tells, since the batch commits or not as one.
                if committed(backend, jobs).await == Some(true) {
                    return;
                }
                if !logged {
                    eprintln!("enqueue: {e:#}; retrying");
                    logged = true;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

async fn insert(backend: &PgBackend, jobs: &[NewJob]) -> anyhow::Result<()> {
    let mut client = backend.pool().get().await?;
    let tx = client.transaction().await?;
    backend.insert_many_in(&tx, jobs).await?;
    let ids: Vec<uuid::Uuid> = jobs.iter().map(|j| j.id).collect();
    tx.execute(include_str!("sql/expect.sql"), &[&ids]).await?;
    tx.commit().await?;
    Ok(())
}

/// Whether the batch is in (`None`: cannot tell yet).
async fn committed(backend: &PgBackend, jobs: &[NewJob]) -> Option<bool> {
    let first = jobs.first()?.id;
    let client = backend.pool().get().await.ok()?;
    let row = client
        .query_opt(include_str!("sql/expected_has.sql"), &[&first])
        .await
        .ok()?;
    Some(row.is_some())
}
