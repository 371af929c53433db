//! OpenTelemetry, with the `otel` feature: traces from the enqueue to every attempt, in
//! any language, and hopper's metrics as OpenTelemetry instruments. See
//! `docs/observability.md`.
//!
//! - [`OtelMiddleware`], a [`Middleware`]: on enqueue it stores the W3C trace context of
//!   the current span (the `hopper.enqueue` span, a child of whatever span the application
//!   enqueued in) in each job's meta as `traceparent` (and `tracestate`), unless the job
//!   already carries one; on each attempt it makes the attempt's `hopper.job` span a child
//!   of that stored context. Add it to the [`Client`](crate::Client)
//!   ([`Client::with_middleware`](crate::Client::with_middleware)) and to the
//!   [`Workers`](crate::Workers) ([`Workers::middleware`](crate::Workers::middleware)).
//! - [`Telemetry`]: the SDK set up from the standard `OTEL_*` environment variables, an
//!   OTLP (HTTP/protobuf) exporter for traces and one for metrics, and the
//!   `tracing-opentelemetry` layer to add to your subscriber.
//! - [`OtelRecorder`]: the `metrics` facade's recorder into OpenTelemetry instruments.
//! - [`QueueGauges`]: the queue gauges of `/metrics`, read from the database every export
//!   interval, as OpenTelemetry observable gauges
//!   ([`Telemetry::queue_gauges`]).
//!
//! ```no_run
//! use hopper::otel::{OtelMiddleware, Telemetry};
//! use tracing_subscriber::layer::SubscriberExt;
//! use tracing_subscriber::util::SubscriberInitExt;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let telemetry = Telemetry::from_env()?;
//! tracing_subscriber::registry()
//!     .with(telemetry.layer())
//!     .with(tracing_subscriber::fmt::layer())
//!     .init();
//! let client = hopper::Client::connect("postgres://postgres@127.0.0.1/postgres")
//!     .await?
//!     .with_middleware(OtelMiddleware::new());
//! // ... enqueue, run a Runtime whose Workers have the middleware too ...
//! telemetry.shutdown();
//! # Ok(()) }
//! ```

mod gauges;
mod metrics;
mod telemetry;
mod transport;

use std::collections::HashMap;

use async_trait::async_trait;
use hopper_core::{ClaimedJob, NewJob, Result};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

pub use self::gauges::QueueGauges;
pub use self::metrics::OtelRecorder;
pub use self::telemetry::{Telemetry, TelemetryError};
use crate::middleware::Middleware;

pub use hopper_core::meta::{TRACEPARENT, TRACESTATE};

/// An environment of `pairs` for the tests of the `OTEL_*` readers.
#[cfg(test)]
fn test_vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    }
}

/// The middleware that carries the trace context from an enqueue to the job's attempts
/// (see the [module docs](self)). Every attempt's span is a child of the enqueuing span,
/// for jobs enqueued one at a time and in bulk alike: a bulk enqueue's trace holds one
/// span per job attempt.
#[derive(Debug, Clone, Default)]
pub struct OtelMiddleware {
    propagator: TraceContextPropagator,
}

impl OtelMiddleware {
    /// The middleware, with the W3C trace context propagator.
    pub fn new() -> Self {
        OtelMiddleware::default()
    }
}

#[async_trait]
impl Middleware for OtelMiddleware {
    async fn enqueue(&self, jobs: &mut [NewJob]) -> Result<()> {
        let context = tracing::Span::current().context();
        if !context.span().span_context().is_valid() {
            return Ok(());
        }
        let mut carrier = HashMap::new();
        self.propagator.inject_context(&context, &mut carrier);
        for job in jobs.iter_mut() {
            inject(&carrier, &mut job.meta);
        }
        Ok(())
    }

    fn enqueue_span(&self, jobs: &[NewJob], span: &tracing::Span) {
        // Only when every job carries the same context: one span has one parent.
        let Some((first, rest)) = jobs.split_first() else {
            return;
        };
        let traceparent = |job: &NewJob| job.meta.get(TRACEPARENT).cloned();
        if rest
            .iter()
            .any(|job| traceparent(job) != traceparent(first))
        {
            return;
        }
        self.continue_in(&first.meta, span);
    }

    fn attempt_span(&self, job: &ClaimedJob, span: &tracing::Span) {
        if let Some(meta) = job.meta.as_object() {
            self.continue_in(meta, span);
        }
    }
}

impl OtelMiddleware {
    /// Makes `span` (not started yet) a child of the trace context stored in `meta`, if it
    /// holds a valid one.
    fn continue_in(&self, meta: &serde_json::Map<String, serde_json::Value>, span: &tracing::Span) {
        if span.is_disabled() {
            return;
        }
        let Some(carrier) = extract(meta) else {
            return;
        };
        let parent = self.propagator.extract(&carrier);
        if parent.span().span_context().is_valid() {
            // Refused only when no OpenTelemetry layer is installed: nothing to continue.
            let _ = span.set_parent(parent);
        }
    }
}

/// Writes the `traceparent` (and a non-empty `tracestate`) of `carrier` into `meta`, unless
/// it holds a `traceparent` already (set by the application, or by the caller of `hopper
/// serve`, `--traceparent` of the CLI, the HTTP header).
fn inject(
    carrier: &HashMap<String, String>,
    meta: &mut serde_json::Map<String, serde_json::Value>,
) {
    if meta.contains_key(TRACEPARENT) {
        return;
    }
    for key in [TRACEPARENT, TRACESTATE] {
        if let Some(value) = carrier.get(key).filter(|v| !v.is_empty()) {
            meta.insert(key.to_owned(), value.clone().into());
        }
    }
}

/// The trace context stored in a job's `meta`, if it holds a `traceparent` string.
fn extract(meta: &serde_json::Map<String, serde_json::Value>) -> Option<HashMap<String, String>> {
    let traceparent = meta.get(TRACEPARENT)?.as_str()?;
    let mut carrier = HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
    if let Some(state) = meta.get(TRACESTATE).and_then(serde_json::Value::as_str) {
        carrier.insert(TRACESTATE.to_owned(), state.to_owned());
    }
    Some(carrier)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_stored_traceparent_is_kept_and_an_empty_tracestate_is_not_written() {
        let carrier = HashMap::from([
            (TRACEPARENT.to_owned(), "00-aa-bb-01".to_owned()),
            (TRACESTATE.to_owned(), String::new()),
        ]);
        let mut meta = serde_json::Map::new();
        inject(&carrier, &mut meta);
        assert_eq!(json!(meta), json!({"traceparent": "00-aa-bb-01"}));

        let mut own = serde_json::Map::from_iter([(TRACEPARENT.to_owned(), json!("00-cc-dd-01"))]);
        inject(&carrier, &mut own);
        assert_eq!(json!(own), json!({"traceparent": "00-cc-dd-01"}));
    }

    #[test]
    fn only_a_string_traceparent_is_extracted() {
        let object = |v: serde_json::Value| v.as_object().cloned().unwrap_or_default();
        assert!(extract(&object(json!({}))).is_none());
        assert!(extract(&object(json!({"traceparent": 7}))).is_none());
        let carrier = extract(&object(json!({"traceparent": "x", "tracestate": "k=v"})));
        assert_eq!(
            carrier
                .as_ref()
                .and_then(|c| c.get(TRACESTATE))
                .map(String::as_str),
            Some("k=v")
        );
    }
}
