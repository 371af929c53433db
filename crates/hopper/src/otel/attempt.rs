//! The OpenTelemetry span of a job attempt, made with the SDK's tracer rather than through
//! the `tracing` bridge: the sampler decides first (with the parent stored in the job's
//! meta), so a sampled-out attempt builds nothing but its span context; and a recorded one
//! skips the bridge's per-span bookkeeping (its builder, field visits and per-poll
//! context), which cost W3 more than the export itself (docs/benchmarks.md).

use std::time::Duration;

use hopper_core::meta::validate_traceparent;
use hopper_core::{ClaimedJob, Outcome};
use opentelemetry::global::{BoxedSpan, BoxedTracer};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{
    Span, SpanBuilder, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer,
};
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
            Some(meta) => parent(propagator, meta),
            None => Context::new(),
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

/// The trace context stored in a job's meta (the parent of its attempt's span, or of a
/// `hopper.enqueue` span): an empty context when the meta holds none, or one that is not
/// valid.
pub(super) fn parent(
    propagator: &TraceContextPropagator,
    meta: &serde_json::Map<String, serde_json::Value>,
) -> Context {
    let Some(traceparent) = meta.get(TRACEPARENT) else {
        return Context::new();
    };
    let plain = traceparent
        .as_str()
        .filter(|_| !meta.contains_key(TRACESTATE));
    match plain.and_then(version_00) {
        Some(span) => Context::new().with_remote_span_context(span),
        None => propagator.extract_with_context(&Context::new(), &MetaCarrier(meta)),
    }
}

/// A `traceparent` of version `00`, the one form every W3C propagator writes, read as the
/// propagator reads it but without its general parser (which splits the header into a
/// vector and scans each field twice): that parser was two fifths of starting an
/// attempt's span, 4% of hopper's CPU on W3 with every span exported (docs/benchmarks.md).
/// Any other form is `None`, left to the propagator; `tests` hold the two to the same
/// answers.
fn version_00(traceparent: &str) -> Option<SpanContext> {
    if !traceparent.starts_with("00-") || validate_traceparent(traceparent).is_err() {
        return None;
    }
    // Validated: ASCII, lowercase hex fields at these places, neither id all zeros.
    let trace_id = TraceId::from_hex(&traceparent[3..35]).ok()?;
    let span_id = SpanId::from_hex(&traceparent[36..52]).ok()?;
    let flags = u8::from_str_radix(&traceparent[53..55], 16).ok()?;
    let flags = TraceFlags::new(flags) & TraceFlags::SAMPLED;
    Some(SpanContext::new(
        trace_id,
        span_id,
        flags,
        true,
        TraceState::default(),
    ))
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    /// The parent that the propagator alone reads from `meta`.
    fn by_propagator(meta: &serde_json::Map<String, serde_json::Value>) -> SpanContext {
        let propagator = TraceContextPropagator::new();
        let parent = propagator.extract_with_context(&Context::new(), &MetaCarrier(meta));
        parent.span().span_context().clone()
    }

    #[test]
    fn a_version_00_traceparent_is_read_as_the_propagator_reads_it() {
        let propagator = TraceContextPropagator::new();
        let traceparents = [
            json!(TP),
            json!(TP.replace("-01", "-00")),
            json!(TP.replace("-01", "-03")),
            json!(TP.replace("-01", "-ff")),
            json!(TP.replace("4bf9", "4BF9")),
            json!(TP.replace("4bf92f3577b34da6a3ce929d0e0e4736", &"0".repeat(32))),
            json!(TP.replace("00f067aa0ba902b7", &"0".repeat(16))),
            json!(format!("{TP}-")),
            json!(format!("{TP}-more")),
            json!(format!(" {TP}")),
            json!(TP.replacen("00-", "01-", 1)),
            json!(format!("{}-more", TP.replacen("00-", "01-", 1))),
            json!(TP.replacen("00-", "ff-", 1)),
            json!(&TP[..54]),
            json!(TP.replace("-00f0", "-ä0")),
            json!(7),
        ];
        let mut read_here = 0;
        for traceparent in traceparents {
            for tracestate in [None, Some("vendor=value")] {
                let mut meta =
                    serde_json::Map::from_iter([(TRACEPARENT.to_owned(), traceparent.clone())]);
                if let Some(state) = tracestate {
                    meta.insert(TRACESTATE.to_owned(), json!(state));
                }
                let ours = parent(&propagator, &meta);
                assert_eq!(
                    ours.span().span_context(),
                    &by_propagator(&meta),
                    "{meta:?}"
                );
                read_here += usize::from(traceparent.as_str().and_then(version_00).is_some());
            }
        }
        // The valid version 00 forms (4 flags), with and without a tracestate.
        assert_eq!(read_here, 8);
        let none = serde_json::Map::new();
        assert!(!parent(&propagator, &none).has_active_span());
    }
}
