//! The OpenTelemetry SDK set up from the standard environment variables.

use std::sync::Arc;
use std::time::Duration;

use hopper_core::Backend;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithHttpConfig as _;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider,
};
use tracing::{Metadata, Subscriber};
use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::combinator::And;
use tracing_subscriber::filter::{FilterExt as _, FilterFn, Filtered};
use tracing_subscriber::layer::Filter;
use tracing_subscriber::registry::LookupSpan;

/// What [`Telemetry::layer`] leaves out: the `hopper.job` spans, which [`OtelMiddleware`]
/// makes.
pub type NotJobSpans = FilterFn<fn(&Metadata<'_>) -> bool>;

/// The layer of [`Telemetry::layer`]: the bridge, filtered by your filter `F` and
/// [`NotJobSpans`].
pub type TraceLayer<S, F> = Filtered<OpenTelemetryLayer<S, SdkTracer>, And<F, NotJobSpans, S>, S>;

/// The filter that leaves out the `hopper.job` spans: add it to a `tracing-opentelemetry`
/// layer of your own (one [`Telemetry::layer`] does not make), or each attempt is exported
/// twice, once by the bridge and once by [`OtelMiddleware`].
pub fn not_job_spans() -> NotJobSpans {
    FilterFn::new(not_a_job_span as fn(&Metadata<'_>) -> bool)
}

fn not_a_job_span(metadata: &Metadata<'_>) -> bool {
    !(metadata.name() == super::attempt::JOB_SPAN && metadata.target() == crate::spans::TARGET)
}

use super::{OtelMiddleware, OtelRecorder, QueueGauges, SCOPE};

/// The batch span processor's queue when `OTEL_BSP_MAX_QUEUE_SIZE` does not set one. The
/// specification's 2,048 is 0.1 s of a runtime running 20,000 jobs/s, a span each: while
/// one batch is encoded and sent, the queue filled and the processor dropped about 3% of
/// the job spans of W3 (docs/benchmarks.md). 16,384 hold most of a second of such a
/// runtime: about 10 MB, taken only while the collector is slower than the jobs.
const SPAN_QUEUE: usize = 16_384;

/// The spans of one export when `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` does not set it. Each
/// export has a cost of its own (an HTTP request, the resource and scope grouped again), so
/// a runtime running tens of thousands of jobs a second paid it about 70 times a second
/// with the specification's 512: 2,048 took about a sixth off the CPU an exported span
/// costs hopper in W3 (about 0.5 MB a request, far below collectors' limits;
/// docs/benchmarks.md). Below 2,048 spans per schedule delay (5 s) nothing changes: the
/// delay sends them.
const EXPORT_BATCH: usize = 2_048;

/// OpenTelemetry's trace and meter providers, as [`Telemetry::from_env`] configured them
/// (either may be absent: then that signal is not exported).
#[derive(Debug, Clone, Default)]
pub struct Telemetry {
    tracer_provider: Option<SdkTracerProvider>,
    meter_provider: Option<SdkMeterProvider>,
    /// How often metrics are exported (and the queue gauges read); `None`: the default.
    metric_interval: Option<Duration>,
}

/// An exporter could not be built from the environment.
#[derive(Debug)]
pub struct TelemetryError(String);

impl std::fmt::Display for TelemetryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OpenTelemetry: {}", self.0)
    }
}

impl std::error::Error for TelemetryError {}

/// Whether a signal (`TRACES`, `METRICS`) is to be exported: when its exporter variable
/// (`OTEL_TRACES_EXPORTER`) says `otlp`, or, when it is unset, when an OTLP endpoint is
/// configured (`OTEL_EXPORTER_OTLP_ENDPOINT` or the signal's own
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`). `none` turns it off, and so does
/// `OTEL_SDK_DISABLED=true`. Unlike the specification's default (OTLP to localhost), a
/// process with nothing configured exports nothing: the same binary runs where no
/// collector listens.
fn exported(signal: &str, var: &dyn Fn(&str) -> Option<String>) -> bool {
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return false;
    }
    match var(&format!("OTEL_{signal}_EXPORTER")) {
        Some(exporter) => exporter
            .split(',')
            .any(|e| e.trim().eq_ignore_ascii_case("otlp")),
        None => {
            var("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
                || var(&format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")).is_some()
        }
    }
}

/// The batch span processor's settings: the SDK's, which read the `OTEL_BSP_*` variables,
/// with hopper's larger queue ([`SPAN_QUEUE`]) and export batch ([`EXPORT_BATCH`]) where
/// `OTEL_BSP_MAX_QUEUE_SIZE` and `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` set none. (The SDK
/// caps a batch at the queue's size.)
fn batch_config(var: &dyn Fn(&str) -> Option<String>) -> BatchConfigBuilder {
    let mut config = BatchConfigBuilder::default();
    if let Some(queue) = unless_set(var, "OTEL_BSP_MAX_QUEUE_SIZE", SPAN_QUEUE) {
        config = config.with_max_queue_size(queue);
    }
    if let Some(batch) = unless_set(var, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", EXPORT_BATCH) {
        config = config.with_max_export_batch_size(batch);
    }
    config
}

/// hopper's `value` for the SDK setting read from `name`, unless the environment sets it.
fn unless_set(var: &dyn Fn(&str) -> Option<String>, name: &str, value: usize) -> Option<usize> {
    var(name).is_none().then_some(value)
}

/// The specification's default export interval of metrics.
const DEFAULT_METRIC_INTERVAL: Duration = Duration::from_secs(60);

/// `OTEL_METRIC_EXPORT_INTERVAL`, in milliseconds; unset or zero: the default. A value
/// that is not a number (the SDK would quietly take the default), or longer than any
/// duration hopper takes ([`hopper_core::limits::MAX_DURATION`]), is refused.
fn metric_interval(var: &dyn Fn(&str) -> Option<String>) -> Result<Duration, TelemetryError> {
    let Some(value) = var("OTEL_METRIC_EXPORT_INTERVAL") else {
        return Ok(DEFAULT_METRIC_INTERVAL);
    };
    match value.trim().parse::<u64>() {
        Ok(0) => Ok(DEFAULT_METRIC_INTERVAL),
        Ok(ms) => hopper_core::limits::check_duration(
            "OTEL_METRIC_EXPORT_INTERVAL",
            Duration::from_millis(ms),
        )
        .map_err(|e| TelemetryError(e.to_string())),
        Err(_) => Err(TelemetryError(format!(
            "OTEL_METRIC_EXPORT_INTERVAL is {value:?}, not a number of milliseconds"
        ))),
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The HTTP client of a signal's exporter: rustls, with the CA file and client
/// certificate of the `OTEL_EXPORTER_OTLP_*CERTIFICATE` variables (see `transport.rs`).
fn client(signal: &str) -> Result<super::transport::Transport, TelemetryError> {
    super::transport::client(signal, &env).map_err(TelemetryError)
}

impl Telemetry {
    /// Sets up what the `OTEL_*` environment variables ask for: OTLP over HTTP/protobuf
    /// for traces and for metrics (each only when configured, see
    /// docs/observability.md), with the SDK's own variables (`OTEL_SERVICE_NAME`,
    /// `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`,
    /// `OTEL_METRIC_EXPORT_INTERVAL`, `OTEL_EXPORTER_OTLP_HEADERS`, ...). Installs the
    /// providers as OpenTelemetry's globals and the W3C trace context as the global
    /// propagator. Nothing configured: an empty [`Telemetry`], which costs nothing.
    pub fn from_env() -> Result<Self, TelemetryError> {
        let mut telemetry = Telemetry::default();
        if exported("TRACES", &env) {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_http_client(client("TRACES")?)
                .build()
                .map_err(|e| TelemetryError(format!("the OTLP span exporter: {e}")))?;
            let batch = BatchSpanProcessor::builder(exporter)
                .with_batch_config(batch_config(&env).build())
                .build();
            let provider = SdkTracerProvider::builder()
                .with_span_processor(batch)
                .build();
            opentelemetry::global::set_tracer_provider(provider.clone());
            telemetry.tracer_provider = Some(provider);
        }
        if exported("METRICS", &env) {
            let exporter = opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_http_client(client("METRICS")?)
                .build()
                .map_err(|e| TelemetryError(format!("the OTLP metric exporter: {e}")))?;
            // The interval read once, here, for the reader and the queue gauges alike.
            let every = metric_interval(&env)?;
            let reader = PeriodicReader::builder(exporter)
                .with_interval(every)
                .build();
            let provider = SdkMeterProvider::builder().with_reader(reader).build();
            telemetry.metric_interval = Some(every);
            opentelemetry::global::set_meter_provider(provider.clone());
            telemetry.meter_provider = Some(provider);
        }
        if telemetry.tracer_provider.is_some() {
            opentelemetry::global::set_text_map_propagator(
                opentelemetry_sdk::propagation::TraceContextPropagator::new(),
            );
        }
        Ok(telemetry)
    }

    /// Telemetry over providers of your own (an in-memory exporter in tests, other
    /// exporters); they are not made global.
    pub fn from_providers(
        tracer_provider: Option<SdkTracerProvider>,
        meter_provider: Option<SdkMeterProvider>,
    ) -> Self {
        Telemetry {
            tracer_provider,
            meter_provider,
            metric_interval: None,
        }
    }

    /// True when traces are exported.
    pub fn traces(&self) -> bool {
        self.tracer_provider.is_some()
    }

    /// True when metrics are exported.
    pub fn metrics(&self) -> bool {
        self.meter_provider.is_some()
    }

    /// The `tracing` layer that turns the spans `filter` enables into OpenTelemetry spans,
    /// when traces are exported (`None` is a layer that does nothing). It records each
    /// span's fields and events, not its busy/idle times, code location, thread or target.
    /// It leaves out hopper's `hopper.job` spans whatever `filter` says: [`OtelMiddleware`]
    /// makes each attempt's span itself (add it to your [`Workers`](crate::Workers)), and
    /// a `hopper.job` span no layer wants is not made at all. A filter such as
    /// `EnvFilter::new("hopper::spans=info,my_app=info")` exports hopper's enqueue spans
    /// and your application's (`hopper::spans=debug` adds the storage calls; see
    /// [`crate::spans`]), whatever your log shows.
    pub fn layer<S, F>(&self, filter: F) -> Option<TraceLayer<S, F>>
    where
        S: Subscriber + for<'span> LookupSpan<'span>,
        F: Filter<S>,
    {
        let tracer = self.tracer_provider.as_ref()?.tracer(SCOPE);
        // Only what a span of hopper's needs: its fields. Busy/idle times would read the
        // clock at every poll of a job's future, and code location, thread and target
        // would add five attributes to every span; together they were most of the cost
        // of a span per job (docs/benchmarks.md).
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_tracked_inactivity(false)
            .with_location(false)
            .with_threads(false)
            .with_target(false);
        // One filter, not a filter on a filtered layer: with two, the registry would still
        // make every `hopper.job` span that the outer filter enables (docs/benchmarks.md).
        Some(
            layer.with_filter(
                filter.and(FilterFn::new(not_a_job_span as fn(&Metadata<'_>) -> bool)),
            ),
        )
    }

    /// The [`OtelMiddleware`] making attempts' spans with this telemetry's tracer provider
    /// (with none, the global one's: spans then go nowhere unless you installed one).
    pub fn middleware(&self) -> OtelMiddleware {
        match &self.tracer_provider {
            Some(provider) => OtelMiddleware::with_tracer(opentelemetry::global::BoxedTracer::new(
                Box::new(provider.tracer(SCOPE)),
            )),
            None => OtelMiddleware::new(),
        }
    }

    /// A `metrics` recorder into OpenTelemetry instruments, when metrics are exported.
    pub fn recorder(&self) -> Option<OtelRecorder> {
        use opentelemetry::metrics::MeterProvider as _;
        let meter = self.meter_provider.as_ref()?.meter(SCOPE);
        Some(OtelRecorder::new(meter))
    }

    /// The queue gauges of `/metrics` (`hopper_jobs`, `hopper_queue_oldest_available_seconds`)
    /// over OTLP, read from `backend` every `OTEL_METRIC_EXPORT_INTERVAL` (60 s by
    /// default), when metrics are exported; keep the value for as long as they should be
    /// (see [`QueueGauges`]). Needs a Tokio runtime.
    pub fn queue_gauges(&self, backend: Arc<dyn Backend>) -> Option<QueueGauges> {
        use opentelemetry::metrics::MeterProvider as _;
        let meter = self.meter_provider.as_ref()?.meter(SCOPE);
        let every = self.metric_interval.unwrap_or(DEFAULT_METRIC_INTERVAL);
        Some(QueueGauges::new(&meter, backend, every))
    }

    /// Exports what is buffered and stops the exporters. Call it before the process
    /// exits, or the last spans and figures are lost.
    pub fn shutdown(&self) {
        if let Some(provider) = &self.tracer_provider
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!(error = %e, "shutting down the OpenTelemetry tracer provider");
        }
        if let Some(provider) = &self.meter_provider
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!(error = %e, "shutting down the OpenTelemetry meter provider");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otel::test_vars as vars;

    #[test]
    fn nothing_is_exported_unless_an_endpoint_or_exporter_is_configured() {
        assert!(!exported("TRACES", &vars(&[])));
        assert!(exported(
            "TRACES",
            &vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")])
        ));
        assert!(exported(
            "METRICS",
            &vars(&[(
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "http://c:4318/v1/metrics"
            )])
        ));
        assert!(!exported(
            "TRACES",
            &vars(&[(
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "http://c:4318/v1/metrics"
            )])
        ));
        assert!(exported(
            "TRACES",
            &vars(&[("OTEL_TRACES_EXPORTER", "console,otlp")])
        ));
    }

    #[test]
    fn the_metric_interval_is_read_in_milliseconds_with_a_default() {
        let interval = |v: &str| {
            metric_interval(&vars(&[("OTEL_METRIC_EXPORT_INTERVAL", v)])).map_err(|e| e.0)
        };
        assert_eq!(
            metric_interval(&vars(&[])).ok(),
            Some(DEFAULT_METRIC_INTERVAL)
        );
        assert_eq!(interval(" 500 "), Ok(Duration::from_millis(500)));
        assert_eq!(interval("0"), Ok(DEFAULT_METRIC_INTERVAL));
        assert_eq!(
            interval("5s"),
            Err("OTEL_METRIC_EXPORT_INTERVAL is \"5s\", not a number of milliseconds".into())
        );
        // Ten years is the longest; u64::MAX ms would overflow the readers' clocks.
        assert!(interval("315360000000").is_ok());
        for absurd in ["315360000001", "18446744073709551615"] {
            let refused = interval(absurd).expect_err("an absurd interval is refused");
            assert!(refused.contains("too long"), "{refused}");
        }
    }

    #[test]
    fn the_span_queue_and_batch_are_larger_unless_the_environment_sets_them() {
        let config = |pairs: &[(&str, &str)]| format!("{:?}", batch_config(&vars(pairs)).build());
        let ours = config(&[]);
        assert!(ours.contains("max_queue_size: 16384"), "{ours}");
        assert!(ours.contains("max_export_batch_size: 2048"), "{ours}");
        // Where the environment sets one, the SDK's own reading of the variable stands.
        let queue = ("OTEL_BSP_MAX_QUEUE_SIZE", "4096");
        assert_eq!(unless_set(&vars(&[queue]), queue.0, SPAN_QUEUE), None);
        let batch = ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "100");
        assert_eq!(unless_set(&vars(&[batch]), batch.0, EXPORT_BATCH), None);
        assert_eq!(unless_set(&vars(&[]), batch.0, EXPORT_BATCH), Some(2048));
    }

    #[test]
    fn none_and_a_disabled_sdk_win_over_an_endpoint() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert!(!exported(
            "TRACES",
            &vars(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")])
        ));
        assert!(!exported(
            "METRICS",
            &vars(&[endpoint, ("OTEL_SDK_DISABLED", "TRUE")])
        ));
    }
}
