//! The OpenTelemetry span of a job attempt, made with the SDK's tracer rather than through
//! the `tracing` bridge: the sampler decides first (with the parent stored in the job's
//! meta), so a sampled-out attempt builds nothing but its span context; and a recorded one
//! skips the bridge's per-span bookkeeping (its builder, field visits and per-poll
//! context), which cost W3 more than the export itself (docs/benchmarks.md).

use std::time::Duration;

use hopper_core::{ClaimedJob, Outcome};
use opentelemetry::global::{BoxedSpan, BoxedTracer};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{Span, SpanBuilder, SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;

use super::{TRACEPARENT, TRACESTATE};
use crate::middleware::AttemptScope;

/// The name of an attempt's span, as the `tracing` span of [`crate::spans`].
pub(super) const JOB_SPAN: &str = "hopper.job";

/// The most attributes an attempt's span has: `queue`, `kind`, `job_id`, `attempt`, then
/// `outcome`, `duration_ms` and `error`.
const ATTRIBUTES: usize = 7;

/// One attempt's span, and the context that makes it the parent of the spans made while
/// the attempt runs.
pub(super) struct AttemptSpan {
    span: BoxedSpan,
    context: Context,
}

impl AttemptSpan {
    /// Starts the span of an attempt of `job` with `tracer`: a child of the trace context
    /// stored in the job's meta, if it holds a valid one, else a root.
    pub(super) fn start(
        tracer: &BoxedTracer,
        propagator: &TraceContextPropagator,
        job: &ClaimedJob,
    ) -> Self {
        let parent = match job.meta.as_object() {
            Some(meta) if meta.contains_key(TRACEPARENT) => propagator.extract(&MetaCarrier(meta)),
            _ => Context::new(),
        };
        // The span keeps this list: reserved whole, the attributes set now and at the end
        // never make it grow (it did twice per recorded span).
        let builder = SpanBuilder::from_name(JOB_SPAN)
            .with_kind(SpanKind::Consumer)
            .with_attributes(Vec::with_capacity(ATTRIBUTES));
        let mut span = tracer.build_with_context(builder, &parent);
        if span.is_recording() {
            let mut id = [0; uuid::fmt::Hyphenated::LENGTH];
            let id = job.lease.job_id.hyphenated().encode_lower(&mut id);
            span.set_attributes([
                KeyValue::new("queue", job.queue.clone()),
                KeyValue::new("kind", job.kind.clone()),
                KeyValue::new("job_id", id.to_owned()),
                KeyValue::new("attempt", i64::from(job.lease.attempt)),
            ]);
        }
        let context = parent.with_remote_span_context(span.span_context().clone());
        AttemptSpan { span, context }
    }
}

impl AttemptScope for AttemptSpan {
    fn within(&self, poll: &mut dyn FnMut()) {
        let _attached = self.context.clone().attach();
        poll();
    }

    fn end(mut self: Box<Self>, outcome: Option<&Outcome>, ran: Duration) {
        if self.span.is_recording() {
            let (label, error) = crate::spans::outcome_label(outcome);
            self.span.set_attribute(KeyValue::new("outcome", label));
            self.span
                .set_attribute(KeyValue::new("duration_ms", crate::spans::millis(ran)));
            if let Some(error) = error {
                self.span
                    .set_attribute(KeyValue::new("error", error.to_owned()));
                self.span.set_status(Status::error(error.to_owned()));
            }
        }
        self.span.end();
    }
}

/// A job's meta as the propagator's carrier: its string values, without copying them.
pub(super) struct MetaCarrier<'a>(pub(super) &'a serde_json::Map<String, serde_json::Value>);

impl Extractor for MetaCarrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(serde_json::Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        [TRACEPARENT, TRACESTATE]
            .into_iter()
            .filter(|key| self.0.contains_key(*key))
            .collect()
    }
}
