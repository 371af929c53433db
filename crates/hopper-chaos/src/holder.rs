//! One more fault of the chaos run: an application that reads jobs `FOR UPDATE`. While the
//! chaos lasts, every 0.5–2 s it opens a transaction, locks a few running jobs' rows, holds
//! them 0.2–2 s and commits, so that renewals, outcomes (the runtime's and `hopper
//! serve`'s), log stores and the rescuer meet held rows in the middle of the kills and
//! restarts, and must neither wait on them nor lose a job (docs/reliability.md). Every
//! other hold also locks the rows of `nodes`, which the nodes' heartbeats and every node's
//! release of silent nodes must not wait on either. It stops with the chaos: held over and
//! over, the last running jobs would only finish later.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// The jobs locked at a time.
const ROWS: i64 = 3;

/// What the holder held: holds that locked at least one running job's row, and those
/// that locked node rows.
#[derive(Debug, Default)]
pub struct Holds {
    /// Holds of running jobs' rows.
    pub jobs: AtomicU64,
    /// Holds of the rows of `nodes`.
    pub nodes: AtomicU64,
}

/// Holds rows while `on`, counting in `holds`. Errors (the database restarting) are waited
/// out and the loop goes on.
pub async fn run(url: String, on: Arc<AtomicBool>, holds: Arc<Holds>) {
    let mut with_nodes = false;
    while on.load(Ordering::Relaxed) {
        with_nodes = !with_nodes;
        if let Ok((jobs, nodes)) = hold_once(&url, with_nodes).await {
            holds.jobs.fetch_add(u64::from(jobs), Ordering::Relaxed);
            holds.nodes.fetch_add(u64::from(nodes), Ordering::Relaxed);
        }
        let gap = Duration::from_millis(rand::random_range(500..=2_000));
        tokio::time::sleep(gap).await;
    }
}

/// One hold, of node rows too `with_nodes`: whether it locked running jobs' rows, and
/// node rows.
async fn hold_once(url: &str, with_nodes: bool) -> anyhow::Result<(bool, bool)> {
    let client = crate::db::connect(url).await?;
    client.batch_execute("BEGIN").await?;
    let locked = client
        .query(
            "SELECT id FROM hopper.jobs WHERE state = 'running' LIMIT $1 FOR UPDATE SKIP LOCKED",
            &[&ROWS],
        )
        .await?;
    let nodes = if with_nodes {
        let sql = "SELECT id FROM hopper.nodes FOR UPDATE SKIP LOCKED";
        !client.query(sql, &[]).await?.is_empty()
    } else {
        false
    };
    let held_for = Duration::from_millis(rand::random_range(200..=2_000));
    tokio::time::sleep(held_for).await;
    client.batch_execute("COMMIT").await?;
    Ok((!locked.is_empty(), nodes))
}
