//! Prometheus metrics at `/metrics`.
//!
//! Two sources, one page:
//!
//! - **Queue gauges**, read from the database at scrape time ([`hopper::backend::Backend::queue_stats`]):
//!   [`hopper::metrics::JOBS`] by queue and state, and
//!   [`hopper::metrics::QUEUE_OLDEST_AVAILABLE_SECONDS`]. They are right however many
//!   processes run workers, and a queue that empties shows zeros rather than stale values.
//! - **Runtime counters and histograms** ([`hopper::metrics`]: enqueued, completed, retried,
//!   failed, start latency, run duration), recorded by the worker runtime and the client of
//!   *this process* through the `metrics` facade. They appear once [`install_recorder`]
//!   was called and its handle given to [`crate::WebState::with_prometheus`].
//!
//! Every name is listed in [`hopper::metrics`] and described in `docs/metrics.md`.

use std::fmt::Write as _;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use hopper::QueueStats;
use hopper::metrics::{HISTOGRAM_BUCKETS, HISTOGRAMS, JOBS, QUEUE_OLDEST_AVAILABLE_SECONDS};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use crate::WebState;
use crate::error::{ApiError, Error, Result};

/// The content type of the Prometheus text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How often [`spawn_upkeep`] runs the recorder's housekeeping.
pub const UPKEEP_PERIOD: Duration = Duration::from_secs(5);

/// Installs the process-wide Prometheus recorder that the `metrics` facade records into,
/// with buckets for hopper's histograms (1 ms to 1 h). Call once, early, before the
/// runtime starts; fails if another recorder is installed.
///
/// [`crate::serve`] runs the recorder's upkeep; when nesting [`crate::router`] in your
/// own server, call [`spawn_upkeep`] too.
pub fn install_recorder() -> Result<PrometheusHandle> {
    let recorder = build_recorder()?;
    let handle = recorder.handle();
    ::metrics::set_global_recorder(recorder).map_err(|e| Error::Metrics(e.to_string()))?;
    Ok(handle)
}

/// The recorder [`install_recorder`] installs, not installed: to wrap it in another (the
/// OpenTelemetry bridge of `hopper::otel`) before installing that.
pub fn build_recorder() -> Result<PrometheusRecorder> {
    let mut builder = PrometheusBuilder::new();
    for name in HISTOGRAMS {
        builder = builder
            .set_buckets_for_metric(Matcher::Full(name.to_owned()), &HISTOGRAM_BUCKETS)
            .map_err(|e| Error::Metrics(e.to_string()))?;
    }
    Ok(builder.build_recorder())
}

/// A background task running the recorder's periodic housekeeping; stopped when dropped.
#[derive(Debug)]
pub struct Upkeep(tokio::task::JoinHandle<()>);

impl Drop for Upkeep {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs `handle`'s upkeep every [`UPKEEP_PERIOD`] until the returned [`Upkeep`] is
/// dropped. Needs a Tokio runtime.
pub fn spawn_upkeep(handle: PrometheusHandle) -> Upkeep {
    Upkeep(tokio::spawn(async move {
        let mut tick = tokio::time::interval(UPKEEP_PERIOD);
        loop {
            tick.tick().await;
            handle.run_upkeep();
        }
    }))
}

/// `GET /metrics`.
pub(crate) async fn scrape(State(state): State<WebState>) -> Result<Response, ApiError> {
    let stats = state.queue_stats().await?;
    let mut page = render_queue_gauges(&stats);
    if let Some(handle) = state.prometheus() {
        page.push_str(&handle.render());
    }
    let mut response = page.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE));
    Ok(response)
}

/// The queue gauges in the Prometheus text format.
fn render_queue_gauges(stats: &[QueueStats]) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(
        out,
        "# HELP {JOBS} Jobs by queue and state, read from the database at scrape time."
    );
    let _ = writeln!(out, "# TYPE {JOBS} gauge");
    for s in stats {
        let queue = escape_label(&s.queue);
        for (state, n) in s.by_state() {
            let _ = writeln!(out, "{JOBS}{{queue=\"{queue}\",state=\"{state}\"}} {n}");
        }
    }
    let _ = writeln!(
        out,
        "# HELP {QUEUE_OLDEST_AVAILABLE_SECONDS} Age of the oldest available job of a queue, in seconds (0 when none)."
    );
    let _ = writeln!(out, "# TYPE {QUEUE_OLDEST_AVAILABLE_SECONDS} gauge");
    for s in stats {
        let _ = writeln!(
            out,
            "{QUEUE_OLDEST_AVAILABLE_SECONDS}{{queue=\"{}\"}} {}",
            escape_label(&s.queue),
            s.oldest_available_secs
        );
    }
    out
}

/// Escapes a label value as the text format requires. (Queue names are plain already; this
/// keeps the page valid whatever a backend returns.)
fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_render_every_state_of_every_queue() {
        let stats = [QueueStats {
            queue: "mail".to_owned(),
            available: 3,
            failed: 1,
            oldest_available_secs: 2.5,
            ..QueueStats::default()
        }];
        let page = render_queue_gauges(&stats);
        assert!(page.contains("# TYPE hopper_jobs gauge"));
        assert!(page.contains("hopper_jobs{queue=\"mail\",state=\"available\"} 3\n"));
        assert!(page.contains("hopper_jobs{queue=\"mail\",state=\"running\"} 0\n"));
        assert!(page.contains("hopper_queue_oldest_available_seconds{queue=\"mail\"} 2.5\n"));
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
