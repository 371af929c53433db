//! One more fault of the chaos run: an application that reads jobs `FOR UPDATE`. While the
//! chaos lasts, every 0.5–2 s it opens a transaction, locks a few running jobs' rows, holds
//! them 0.2–2 s and commits, so that renewals, outcomes (the runtime's and `hopper
//! serve`'s), log stores and the rescuer meet held rows in the middle of the kills and
//! restarts, and must neither wait on them nor lose a job (docs/reliability.md). It stops
//! with the chaos: held over and over, the last running jobs would only finish later.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The jobs locked at a time.
const ROWS: i64 = 3;

/// Holds rows while `on`; counts the holds that locked at least one row in `holds`.
/// Errors (the database restarting) are waited out and the loop goes on.
pub async fn run(url: String, on: Arc<AtomicBool>, holds: Arc<AtomicU64>) {
    while on.load(Ordering::Relaxed) {
        if let Ok(true) = hold_once(&url).await {
            holds.fetch_add(1, Ordering::Relaxed);
        }
        let gap = Duration::from_millis(rand::random_range(500..=2_000));
        tokio::time::sleep(gap).await;
    }
}

/// One hold: true if it locked a row.
async fn hold_once(url: &str) -> anyhow::Result<bool> {
    let client = crate::db::connect(url).await?;
    client.batch_execute("BEGIN").await?;
    let locked = client
        .query(
            "SELECT id FROM hopper.jobs WHERE state = 'running' LIMIT $1 FOR UPDATE SKIP LOCKED",
            &[&ROWS],
        )
        .await?;
    let held_for = Duration::from_millis(rand::random_range(200..=2_000));
    tokio::time::sleep(held_for).await;
    client.batch_execute("COMMIT").await?;
    Ok(!locked.is_empty())
}
