//! `hopper stats --watch`: a live view of the queues, redrawn every interval until Ctrl-C.
//!
//! Each refresh shows the counts of `hopper stats` and, per queue, how many jobs finished
//! (completed or failed) per second since the previous refresh. On a terminal the screen is
//! redrawn in place; otherwise (or with `--json`, one JSON line per refresh) each refresh is
//! appended, so the output can be piped.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hopper::QueueStats;
use hopper::backend::Backend;

use crate::admin::{print_table, stats_row};
use crate::output::{out, outln};

/// Refreshes every `interval` until Ctrl-C (or SIGTERM).
pub async fn run(backend: &Arc<dyn Backend>, interval: Duration, json: bool) -> anyhow::Result<()> {
    let interval = interval.max(Duration::from_millis(100));
    let redraw = !json && std::io::stdout().is_terminal();
    let mut previous: Option<(Instant, HashMap<String, u64>)> = None;
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = &mut stop => return Ok(()),
        }
        let queues = match backend.queue_stats().await {
            Ok(q) => q,
            // A live view keeps going through a database restart, with or without --json:
            // it says so on stderr and tries again at the next refresh.
            Err(e) if e.is_transient() => {
                eprintln!("hopper stats --watch: {e}; retrying");
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let now = Instant::now();
        let finished: HashMap<String, u64> = queues
            .iter()
            .map(|q| {
                (
                    q.queue.clone(),
                    u64::try_from(q.completed + q.failed).unwrap_or(0),
                )
            })
            .collect();
        let rates = rates(previous.as_ref(), now, &finished);
        previous = Some((now, finished));
        if json {
            let line = serde_json::json!({
                "at": chrono::Utc::now(),
                "queues": queues,
                "finished_per_sec": rates,
            });
            outln!("{line}");
            continue;
        }
        if redraw {
            // Clear the screen and move home.
            out!("\x1b[2J\x1b[H");
        }
        draw(&queues, &rates, interval)?;
    }
}

/// Jobs finished per second per queue since `previous` (none on the first refresh).
/// Pruning lowers the counts; a queue whose count went down shows 0 for that refresh.
fn rates(
    previous: Option<&(Instant, HashMap<String, u64>)>,
    now: Instant,
    finished: &HashMap<String, u64>,
) -> HashMap<String, f64> {
    let Some((then, before)) = previous else {
        return HashMap::new();
    };
    let secs = now.duration_since(*then).as_secs_f64().max(1e-3);
    finished
        .iter()
        .map(|(queue, n)| {
            let done = n.saturating_sub(before.get(queue).copied().unwrap_or(*n));
            (queue.clone(), done as f64 / secs)
        })
        .collect()
}

fn draw(
    queues: &[QueueStats],
    rates: &HashMap<String, f64>,
    interval: Duration,
) -> anyhow::Result<()> {
    outln!(
        "hopper stats --watch  {}  (every {}; Ctrl-C to stop)\n",
        chrono::Local::now().format("%H:%M:%S"),
        humantime::format_duration(interval)
    );
    if queues.is_empty() {
        outln!("no jobs");
        return Ok(());
    }
    let rows = queues
        .iter()
        .map(|q| {
            let mut row = stats_row(q);
            row.push(
                rates
                    .get(&q.queue)
                    .map_or_else(|| "-".to_owned(), |r| format!("{r:.0}")),
            );
            row
        })
        .collect();
    print_table(
        "",
        &[
            "QUEUE",
            "AVAILABLE",
            "SCHEDULED",
            "RUNNING",
            "COMPLETED",
            "FAILED",
            "CANCELLED",
            "OLDEST AVAILABLE",
            "FINISHED/S",
        ],
        rows,
    )
}
