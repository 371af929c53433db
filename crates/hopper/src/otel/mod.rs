//! OpenTelemetry, with the `otel` feature: traces from the enqueue to every attempt, in
//! any language, and hopper's metrics as OpenTelemetry instruments. See
//! `docs/observability.md`.
//!
//! - [`OtelMiddleware`], a [`Middleware`]: on enqueue it stores the W3C trace context of
//!   the current span (the `hopper.enqueue` span, a child of whatever span the application
//!   enqueued in) in each job's meta as `traceparent` (and `tracestate`), unless the job
//!   already carries one; on each attempt it makes the attempt's `hopper.job` span, with
//!   the OpenTelemetry tracer, a child of that stored context. Add it to the
//!   [`Client`](crate::Client) ([`Client::with_middleware`](crate::Client::with_middleware))
//!   and to the [`Workers`](crate::Workers)
//!   ([`Workers::middleware`](crate::Workers::middleware)); [`Telemetry::middleware`]
//!   makes one with the telemetry's tracer.
//! - [`Telemetry`]: the SDK set up from the standard `OTEL_*` environment variables, an
//!   OTLP (HTTP/protobuf) exporter for traces and one for metrics, and the
//!   `tracing-opentelemetry` layer to add to your subscriber, with a filter of its own.
//! - [`OtelRecorder`]: the `metrics` facade's recorder into OpenTelemetry instruments.
//! - [`QueueGauges`]: the queue gauges of `/metrics`, read from the database every export
//!   interval, as OpenTelemetry observable gauges
//!   ([`Telemetry::queue_gauges`]).
//!
//! ```no_run
//! use hopper::otel::Telemetry;
//! use tracing_subscriber::layer::SubscriberExt;
//! use tracing_subscriber::util::SubscriberInitExt;
//! use tracing_subscriber::EnvFilter;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let telemetry = Telemetry::from_env()?;
//! tracing_subscriber::registry()
//!     .with(telemetry.layer(EnvFilter::new("hopper::spans=info,my_app=info")))
//!     .with(tracing_subscriber::fmt::layer())
//!     .init();
//! let client = hopper::Client::connect("postgres://postgres@127.0.0.1/postgres")
//!     .await?
//!     .with_middleware(telemetry.middleware());
//! // ... enqueue, run a Runtime whose Workers have the middleware too ...
//! telemetry.shutdown();
//! # Ok(()) }
//! ```

mod attempt;
mod gauges;
mod metrics;
mod telemetry;
mod transport;

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use hopper_core::{ClaimedJob, NewJob, Result};
use opentelemetry::global::BoxedTracer;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use self::attempt::AttemptSpan;
pub use self::gauges::QueueGauges;
pub use self::metrics::OtelRecorder;
pub use self::telemetry::{NotJobSpans, Telemetry, TelemetryError, TraceLayer, not_job_spans};
use crate::middleware::{AttemptScope, Middleware};

pub use hopper_core::meta::{TRACEPARENT, TRACESTATE};

/// The name hopper's tracer and meter carry (the instrumentation scope).
const SCOPE: &str = "hopper";

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
///
/// The attempt's span is made with an OpenTelemetry tracer, not through the `tracing`
/// bridge (whose layer, [`Telemetry::layer`], leaves `hopper.job` spans to it): the
/// sampler decides when the attempt starts, so a sampled-out attempt costs its sampling
/// and no more. While the attempt runs its context is the current OpenTelemetry context,
/// so the spans your handler makes are its children.
#[derive(Debug, Clone)]
pub struct OtelMiddleware {
    propagator: TraceContextPropagator,
    /// The tracer of the attempts' spans; `None`: the global provider's at each attempt.
    tracer: Option<Arc<BoxedTracer>>,
}

impl Default for OtelMiddleware {
    fn default() -> Self {
        OtelMiddleware::new()
    }
}

impl OtelMiddleware {
    /// The middleware, with the W3C trace context propagator, making attempts' spans with
    /// the global tracer provider (the one [`Telemetry::from_env`] installs), as it is when
    /// each attempt starts.
    pub fn new() -> Self {
        OtelMiddleware {
            propagator: TraceContextPropagator::new(),
            tracer: None,
        }
    }

    /// The middleware, making attempts' spans with `tracer`.
    pub fn with_tracer(tracer: BoxedTracer) -> Self {
        OtelMiddleware {
            propagator: TraceContextPropagator::new(),
            tracer: Some(Arc::new(tracer)),
        }
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
        if span.is_disabled() {
            return;
        }
        // Only when every job carries the same context: one span has one parent.
        let Some((first, rest)) = jobs.split_first() else {
            return;
        };
        let traceparent = first.meta.get(TRACEPARENT);
        if rest
            .iter()
            .any(|job| job.meta.get(TRACEPARENT) != traceparent)
        {
            return;
        }
        if traceparent.is_none() {
            return;
        }
        let parent = attempt::parent(&self.propagator, &first.meta);
        if parent.span().span_context().is_valid() {
            // Refused only when no OpenTelemetry layer is installed: nothing to continue.
            let _ = span.set_parent(parent);
        }
    }

    fn attempt(&self, job: &ClaimedJob) -> Option<Box<dyn AttemptScope>> {
        let span = match &self.tracer {
            Some(tracer) => AttemptSpan::start(tracer, &self.propagator, job),
            None => {
                AttemptSpan::start(&opentelemetry::global::tracer(SCOPE), &self.propagator, job)
            }
        };
        Some(Box::new(span))
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
    fn only_a_string_traceparent_is_read() {
        use opentelemetry::propagation::Extractor;
        let object = |v: serde_json::Value| v.as_object().cloned().unwrap_or_default();
        let empty = object(json!({}));
        assert_eq!(attempt::MetaCarrier(&empty).get(TRACEPARENT), None);
        let number = object(json!({"traceparent": 7}));
        assert_eq!(attempt::MetaCarrier(&number).get(TRACEPARENT), None);
        let both = object(json!({"traceparent": "x", "tracestate": "k=v", "other": "y"}));
        let carrier = attempt::MetaCarrier(&both);
        assert_eq!(carrier.get(TRACESTATE), Some("k=v"));
        assert_eq!(carrier.keys(), [TRACEPARENT, TRACESTATE]);
    }
}
