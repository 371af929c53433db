//! The binary's log and, with the `otel` feature, its OpenTelemetry export: the log goes to
//! stderr filtered by `HOPPER_LOG` (default `warn`); traces are exported over OTLP when the
//! `OTEL_*` variables configure an exporter (docs/observability.md), filtered by
//! `HOPPER_TRACE` (default `hopper::spans=info`: the enqueue and job spans); and then every
//! client and worker of the binary carries the trace context through the job's meta.

use std::sync::Arc;
#[cfg(feature = "otel")]
use std::sync::OnceLock;

use hopper::backend::Backend;
use hopper::{Client, Workers};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer as _};

/// What the process exports, once [`init`] ran (`otel` feature).
#[cfg(feature = "otel")]
static TELEMETRY: OnceLock<hopper::otel::Telemetry> = OnceLock::new();

/// Flushes and stops the exporters when dropped, at the end of `main`.
pub struct Guard;

impl Drop for Guard {
    fn drop(&mut self) {
        #[cfg(feature = "otel")]
        if let Some(telemetry) = TELEMETRY.get() {
            telemetry.shutdown();
        }
    }
}

/// Installs the log subscriber (and the OpenTelemetry layer, when traces are exported).
/// A bad OpenTelemetry configuration is said on stderr and leaves the export off: the
/// command still runs.
pub fn init(ansi: bool) -> Guard {
    let log = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .with_filter(
            EnvFilter::try_from_env("HOPPER_LOG").unwrap_or_else(|_| EnvFilter::new("warn")),
        );
    let registry = tracing_subscriber::registry().with(log);
    #[cfg(feature = "otel")]
    {
        let telemetry = hopper::otel::Telemetry::from_env().unwrap_or_else(|e| {
            eprintln!("hopper: {e}; exporting nothing");
            hopper::otel::Telemetry::default()
        });
        let filter = EnvFilter::try_from_env("HOPPER_TRACE")
            .unwrap_or_else(|_| EnvFilter::new("hopper::spans=info"));
        let layer = telemetry.layer(filter);
        registry.with(layer).init();
        let _ = TELEMETRY.set(telemetry);
    }
    #[cfg(not(feature = "otel"))]
    registry.init();
    Guard
}

/// The OpenTelemetry middleware, with the exporting provider's tracer, when traces are
/// exported. (Its tracer is taken once here, not looked up at each attempt as
/// `OtelMiddleware::new()` does.)
#[cfg(feature = "otel")]
fn middleware() -> Option<hopper::otel::OtelMiddleware> {
    TELEMETRY
        .get()
        .filter(|t| t.traces())
        .map(hopper::otel::Telemetry::middleware)
}

/// A client over `backend`, storing the trace context in what it enqueues when traces are
/// exported.
pub fn client(backend: Arc<dyn Backend>) -> Client {
    let client = Client::new(backend);
    #[cfg(feature = "otel")]
    if let Some(middleware) = middleware() {
        return client.with_middleware(middleware);
    }
    client
}

/// A client with the OpenTelemetry middleware when traces are exported, else none: what
/// `hopper serve` enqueues submissions through (with none, straight to the backend).
pub fn tracing_client(backend: &Arc<dyn Backend>) -> Option<Client> {
    #[cfg(feature = "otel")]
    if let Some(middleware) = middleware() {
        return Some(Client::new(backend.clone()).with_middleware(middleware));
    }
    let _ = backend;
    None
}

/// An empty worker registry, continuing each job's trace when traces are exported.
pub fn workers() -> Workers {
    let workers = Workers::new();
    #[cfg(feature = "otel")]
    if let Some(middleware) = middleware() {
        let mut workers = workers;
        workers.middleware(middleware);
        return workers;
    }
    workers
}

/// The queue gauges over OTLP when metrics are exported (`otel` feature), read from
/// `backend`; they are exported while the returned value lives.
pub fn queue_gauges(backend: &Arc<dyn Backend>) -> Option<impl Sized + use<>> {
    #[cfg(feature = "otel")]
    return TELEMETRY
        .get()
        .and_then(|t| t.queue_gauges(backend.clone()));
    #[cfg(not(feature = "otel"))]
    {
        let _ = backend;
        None::<()>
    }
}

/// Installs the `metrics` recorder: OpenTelemetry's when metrics are exported, recording
/// into `prometheus` too when `/metrics` is served; `prometheus` alone otherwise; none when
/// neither is wanted.
pub fn install_recorder(
    prometheus: Option<metrics_exporter_prometheus::PrometheusRecorder>,
) -> anyhow::Result<()> {
    #[cfg(feature = "otel")]
    if let Some(otel) = TELEMETRY.get().and_then(hopper::otel::Telemetry::recorder) {
        return match prometheus {
            Some(prometheus) => {
                metrics::set_global_recorder(otel.with_inner(prometheus)).map_err(installed)
            }
            None => metrics::set_global_recorder(otel).map_err(installed),
        };
    }
    if let Some(prometheus) = prometheus {
        metrics::set_global_recorder(prometheus).map_err(installed)?;
    }
    Ok(())
}

/// The error of a second recorder installation.
fn installed<R>(e: metrics::SetRecorderError<R>) -> anyhow::Error {
    anyhow::anyhow!("installing the metrics recorder: {e}")
}
