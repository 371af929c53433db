//! `/api/v1/queues` and `/api/v1/stats`: counts, throughput and latency.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, Query, State};
use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use hopper::backend::{JobStatsParams, MinuteStats};
use hopper::{Error, QueueSettings, QueueStats};
use serde::{Deserialize, Serialize};

use super::input::whole_number;
use crate::WebState;
use crate::error::ApiError;

/// The default span of `/api/v1/stats`, in minutes.
const DEFAULT_MINUTES: u32 = 60;
/// The longest span of `/api/v1/stats`, in minutes (a day).
const MAX_MINUTES: u32 = 1440;

/// A queue: its counts by state and its settings.
#[derive(Debug, Serialize)]
pub(crate) struct QueueView {
    #[serde(flatten)]
    stats: QueueStats,
    /// No job of this queue is claimed while paused.
    paused: bool,
    /// Its settings (pause, limits), or `null` when it has none (or the backend keeps none).
    settings: Option<QueueSettings>,
}

/// `GET /api/v1/queues`: every queue with its counts by state and its settings, by name.
/// A queue with settings and no job is listed too (with zero counts).
pub(crate) async fn list(
    State(state): State<WebState>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let stats = state.queue_stats().await?;
    let settings = match state.backend().queue_list().await {
        Ok(settings) => settings,
        Err(Error::Unsupported(_)) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    let mut settings: BTreeMap<String, QueueSettings> =
        settings.into_iter().map(|s| (s.queue.clone(), s)).collect();
    let mut queues: BTreeMap<String, QueueView> = BTreeMap::new();
    for s in stats {
        let own = settings.remove(&s.queue);
        queues.insert(
            s.queue.clone(),
            QueueView {
                paused: own.as_ref().is_some_and(|o| o.paused),
                settings: own,
                stats: s,
            },
        );
    }
    for (name, own) in settings {
        queues.insert(
            name.clone(),
            QueueView {
                stats: QueueStats {
                    queue: name,
                    ..QueueStats::default()
                },
                paused: own.paused,
                settings: Some(own),
            },
        );
    }
    let queues: Vec<QueueView> = queues.into_values().collect();
    Ok(Json(serde_json::json!({ "queues": queues })))
}

/// `POST /api/v1/queues/{queue}/pause`: no node claims the queue's jobs until resumed.
pub(crate) async fn pause(
    State(state): State<WebState>,
    queue: Result<Path<String>, PathRejection>,
) -> Result<Json<QueueSettings>, ApiError> {
    let Path(queue) = queue.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let settings = state.client().pause(&queue).await?;
    tracing::info!(%queue, "queue paused through the API");
    Ok(Json(settings))
}

/// `POST /api/v1/queues/{queue}/resume`.
pub(crate) async fn resume(
    State(state): State<WebState>,
    queue: Result<Path<String>, PathRejection>,
) -> Result<Json<QueueSettings>, ApiError> {
    let Path(queue) = queue.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let settings = state.client().resume(&queue).await?;
    tracing::info!(%queue, "queue resumed through the API");
    Ok(Json(settings))
}

/// Counts by state, summed over queues.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Totals {
    scheduled: i64,
    available: i64,
    running: i64,
    completed: i64,
    failed: i64,
    cancelled: i64,
}

/// The whole window summed up.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Summary {
    /// Jobs completed in the window.
    completed: i64,
    /// Jobs dead-lettered in the window.
    failed: i64,
    /// Completed per minute, averaged over the window.
    completed_per_minute: f64,
    /// Mean due-to-start latency of the jobs finished in the window, in milliseconds.
    latency_avg_ms: f64,
    /// The worst minute's 95th-percentile latency, in milliseconds.
    latency_p95_max_ms: f64,
    /// Mean run time of the jobs completed in the window, in milliseconds.
    duration_avg_ms: f64,
}

#[derive(Debug, Serialize)]
pub(crate) struct Stats {
    /// When these figures were computed.
    now: DateTime<Utc>,
    /// Queues known.
    queues: usize,
    totals: Totals,
    /// The window, in minutes.
    window_minutes: u32,
    /// `null` when the backend cannot compute per-minute figures; see `activity_error`.
    summary: Option<Summary>,
    /// One entry per minute of the window, oldest first, zeros where nothing finished.
    minutes: Option<Vec<MinuteStats>>,
    /// Why `minutes` is missing, if it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    activity_error: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatsQuery {
    minutes: Option<String>,
}

/// `GET /api/v1/stats`: totals, and throughput and latency per minute over the window.
pub(crate) async fn stats(
    State(state): State<WebState>,
    query: Result<Query<StatsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Stats>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let window_minutes = match query.minutes.filter(|m| !m.trim().is_empty()) {
        None => DEFAULT_MINUTES,
        Some(m) => whole_number("minutes", &m, MAX_MINUTES)?,
    };
    let queues = state.queue_stats().await?;
    let totals = totals(&queues);
    let now = Utc::now();
    let params = JobStatsParams {
        window: Duration::from_secs(u64::from(window_minutes) * 60),
    };
    let backend = state.backend();
    let stats = match backend.stats() {
        Some(store) => {
            let read = store.job_stats_per_minute(&params);
            state
                .readings()
                .minutes(window_minutes, read)
                .await
                .map(Some)
        }
        None => Ok(None),
    };
    let (summary, minutes, activity_error) = match stats {
        Ok(Some(rows)) => {
            let minutes = fill_minutes(now, window_minutes, rows);
            (Some(summarize(&minutes)), Some(minutes), None)
        }
        Ok(None) => {
            let why = format!("per-minute job statistics ({} backend)", backend.name());
            (None, None, Some(why))
        }
        Err(Error::Unsupported(m)) => (None, None, Some(m)),
        Err(e) => return Err(e.into()),
    };
    Ok(Json(Stats {
        now,
        queues: queues.len(),
        totals,
        window_minutes,
        summary,
        minutes,
        activity_error,
    }))
}

fn totals(queues: &[QueueStats]) -> Totals {
    queues.iter().fold(Totals::default(), |mut t, q| {
        t.scheduled += q.scheduled;
        t.available += q.available;
        t.running += q.running;
        t.completed += q.completed;
        t.failed += q.failed;
        t.cancelled += q.cancelled;
        t
    })
}

/// One entry per minute from `window` minutes ago to the current minute, with the
/// backend's figures where it has some and zeros elsewhere.
fn fill_minutes(now: DateTime<Utc>, window: u32, rows: Vec<MinuteStats>) -> Vec<MinuteStats> {
    let current = now.duration_trunc(TimeDelta::minutes(1)).unwrap_or(now);
    let first = current - TimeDelta::minutes(i64::from(window) - 1);
    let mut rows = rows.into_iter().peekable();
    let mut out = Vec::with_capacity(window as usize);
    for i in 0..i64::from(window) {
        let minute = first + TimeDelta::minutes(i);
        // Skip anything older than the window (the backend's "now" may differ a little).
        while rows.peek().is_some_and(|r| r.minute < minute) {
            rows.next();
        }
        match rows.next_if(|r| r.minute == minute) {
            Some(row) => out.push(row),
            None => out.push(MinuteStats {
                minute,
                ..MinuteStats::default()
            }),
        }
    }
    out
}

fn summarize(minutes: &[MinuteStats]) -> Summary {
    let completed: i64 = minutes.iter().map(|m| m.completed).sum();
    let failed: i64 = minutes.iter().map(|m| m.failed).sum();
    let finished = completed + failed;
    let weighted = |f: fn(&MinuteStats) -> f64, weight: fn(&MinuteStats) -> i64, total: i64| {
        if total == 0 {
            0.0
        } else {
            minutes.iter().map(|m| f(m) * weight(m) as f64).sum::<f64>() / total as f64
        }
    };
    Summary {
        completed,
        failed,
        completed_per_minute: completed as f64 / minutes.len().max(1) as f64,
        latency_avg_ms: weighted(|m| m.latency_avg_ms, |m| m.completed + m.failed, finished),
        latency_p95_max_ms: minutes.iter().map(|m| m.latency_p95_ms).fold(0.0, f64::max),
        duration_avg_ms: weighted(|m| m.duration_avg_ms, |m| m.completed, completed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minutes_are_filled_and_summed() {
        let now = DateTime::parse_from_rfc3339("2026-01-01T12:30:45Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default();
        let at = |m: i64| {
            now.duration_trunc(TimeDelta::minutes(1)).unwrap_or(now) - TimeDelta::minutes(m)
        };
        let rows = vec![
            MinuteStats {
                minute: at(90),
                completed: 100,
                ..MinuteStats::default()
            },
            MinuteStats {
                minute: at(2),
                completed: 3,
                failed: 1,
                latency_avg_ms: 10.0,
                latency_p95_ms: 40.0,
                duration_avg_ms: 5.0,
                ..MinuteStats::default()
            },
            MinuteStats {
                minute: at(0),
                completed: 1,
                latency_avg_ms: 30.0,
                latency_p95_ms: 30.0,
                duration_avg_ms: 9.0,
                ..MinuteStats::default()
            },
        ];
        let minutes = fill_minutes(now, 60, rows);
        assert_eq!(minutes.len(), 60);
        assert_eq!(minutes[59].minute, at(0));
        assert_eq!(minutes[57].completed, 3);
        assert_eq!(minutes[0].minute, at(59));
        let s = summarize(&minutes);
        assert_eq!((s.completed, s.failed), (4, 1));
        assert!((s.latency_avg_ms - (10.0 * 4.0 + 30.0) / 5.0).abs() < 1e-9);
        assert!((s.duration_avg_ms - (5.0 * 3.0 + 9.0) / 4.0).abs() < 1e-9);
        assert_eq!(s.latency_p95_max_ms, 40.0);
    }
}
