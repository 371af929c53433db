//! OpenTelemetry (`hopper::otel`) captured with the SDK's in-memory exporter: a request
//! span of the application, the enqueue inside it and the job's attempt on a real
//! runtime (SQLite) form one trace, parent to child; the spans carry their documented
//! fields, kinds and status; the storage calls have spans too.

use std::sync::Arc;
use std::time::Duration;

use hopper::backend::Backend;
use hopper::otel::{OtelMiddleware, Telemetry};
use hopper::{
    Client, JobArgs, JobContext, JobError, NewJob, Runtime, RuntimeConfig, SqliteBackend,
    SqliteOptions, Worker, Workers,
};
use opentelemetry::trace::{SpanKind, Status};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{EnvFilter, Layer};

#[derive(Serialize, Deserialize)]
struct Ping {
    fail: bool,
}

impl JobArgs for Ping {
    const KIND: &'static str = "ping";
}

/// Says on `done` that it ran; fails permanently when asked to.
struct Pinger(mpsc::UnboundedSender<()>);

#[async_trait::async_trait]
impl Worker for Pinger {
    type Args = Ping;

    async fn process(&self, _ctx: &JobContext, args: Ping) -> Result<(), JobError> {
        let _ = self.0.send(());
        if args.fail {
            return Err(JobError::permanent("told to fail"));
        }
        Ok(())
    }
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|KeyValue { key: k, .. }| k.as_str() == key)
        .map(|kv| &kv.value)
}

fn text(span: &SpanData, key: &str) -> String {
    attribute(span, key)
        .map(|v| v.as_str().into_owned())
        .unwrap_or_default()
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// Runs `work` with the in-memory exporter's subscriber as the default on this thread (the
/// test's runtime is single-threaded, so the runtime's tasks record there too), then
/// answers every span it finished.
async fn captured<F: Future<Output = anyhow::Result<()>>>(
    work: impl FnOnce() -> F,
) -> anyhow::Result<Vec<SpanData>> {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let telemetry = Telemetry::from_providers(Some(provider.clone()), None);
    let filter = EnvFilter::new("hopper::spans=debug,otel=info");
    let subscriber = tracing_subscriber::registry().with(telemetry.layer().with_filter(filter));
    {
        let _default = tracing::subscriber::set_default(subscriber);
        work().await?;
    }
    provider.force_flush()?;
    Ok(exporter.get_finished_spans()?)
}

async fn sqlite() -> anyhow::Result<Arc<dyn Backend>> {
    let backend: Arc<dyn Backend> =
        Arc::new(SqliteBackend::open_in_memory(SqliteOptions::default()).await?);
    backend.migrate().await?;
    Ok(backend)
}

/// Enqueues `jobs` inside a request span with the middleware, then runs them on a runtime
/// with the middleware until each has run once.
async fn enqueue_and_run(jobs: Vec<NewJob>) -> anyhow::Result<()> {
    let backend = sqlite().await?;
    let client = Client::new(backend.clone()).with_middleware(OtelMiddleware::new());
    let request = tracing::info_span!("http.request", http.route = "/signup");
    let count = jobs.len();
    async {
        match jobs.as_slice() {
            [one] => client.insert(one.clone()).await.map(drop),
            many => client.insert_many(many).await,
        }
    }
    .instrument(request)
    .await?;

    let (done, mut ran) = mpsc::unbounded_channel();
    let mut workers = Workers::new();
    workers
        .register(Pinger(done))
        .middleware(OtelMiddleware::new());
    let config = RuntimeConfig::default().with_poll_interval(Duration::from_millis(20));
    let handle = Runtime::new(backend, workers, config).start().await?;
    for _ in 0..count {
        tokio::time::timeout(Duration::from_secs(20), ran.recv()).await?;
    }
    // Waits for the attempts to end, so their spans are closed.
    handle.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn request_enqueue_and_attempt_are_one_trace() -> anyhow::Result<()> {
    let jobs = vec![NewJob::of(&Ping { fail: false })?];
    let spans = captured(|| enqueue_and_run(jobs)).await?;

    let [request] = named(&spans, "http.request")[..] else {
        panic!("one request span: {spans:#?}");
    };
    let [enqueue] = named(&spans, "hopper.enqueue")[..] else {
        panic!("one enqueue span: {spans:#?}");
    };
    let [job] = named(&spans, "hopper.job")[..] else {
        panic!("one job span: {spans:#?}");
    };
    let trace = request.span_context.trace_id();
    assert_eq!(enqueue.span_context.trace_id(), trace);
    assert_eq!(enqueue.parent_span_id, request.span_context.span_id());
    assert_eq!(enqueue.span_kind, SpanKind::Producer);
    assert_eq!(text(enqueue, "queue"), "default");
    assert_eq!(text(enqueue, "outcome"), "ok");

    assert_eq!(
        job.span_context.trace_id(),
        trace,
        "the attempt continues the trace"
    );
    assert_eq!(job.parent_span_id, enqueue.span_context.span_id());
    assert!(
        job.parent_span_is_remote,
        "the parent came through the job's meta"
    );
    assert_eq!(job.span_kind, SpanKind::Consumer);
    assert_eq!(text(job, "kind"), "ping");
    assert_eq!(text(job, "outcome"), "completed");
    assert_eq!(attribute(job, "attempt"), Some(&Value::I64(1)));
    assert!(attribute(job, "duration_ms").is_some());
    assert!(attribute(job, "error").is_none());
    assert_eq!(job.status, Status::Unset);

    // The storage calls: a claim that found the job, and the batch that wrote its outcome.
    let claims = named(&spans, "hopper.claim");
    assert!(
        claims
            .iter()
            .any(|c| attribute(c, "jobs") == Some(&Value::I64(1)) && text(c, "outcome") == "ok"),
        "{claims:#?}"
    );
    assert!(!named(&spans, "hopper.finish_batch").is_empty());
    Ok(())
}

#[tokio::test]
async fn a_bulk_enqueue_parents_every_attempt_and_a_failure_is_an_error() -> anyhow::Result<()> {
    let jobs = vec![
        NewJob::of(&Ping { fail: false })?,
        NewJob::of(&Ping { fail: true })?,
    ];
    let spans = captured(|| enqueue_and_run(jobs)).await?;

    let [enqueue] = named(&spans, "hopper.enqueue")[..] else {
        panic!("one enqueue span: {spans:#?}");
    };
    assert_eq!(attribute(enqueue, "jobs"), Some(&Value::I64(2)));
    let jobs = named(&spans, "hopper.job");
    assert_eq!(jobs.len(), 2, "{spans:#?}");
    for job in &jobs {
        assert_eq!(job.span_context.trace_id(), enqueue.span_context.trace_id());
        assert_eq!(job.parent_span_id, enqueue.span_context.span_id());
    }
    let failed = jobs
        .iter()
        .find(|j| text(j, "outcome") == "failed")
        .expect("the failed attempt");
    assert_eq!(text(failed, "error"), "told to fail");
    assert!(
        matches!(failed.status, Status::Error { .. }),
        "{:?}",
        failed.status
    );
    Ok(())
}

#[tokio::test]
async fn without_an_opentelemetry_layer_no_trace_context_is_stored() -> anyhow::Result<()> {
    let backend = sqlite().await?;
    let client = Client::new(backend).with_middleware(OtelMiddleware::new());
    let id = client
        .enqueue(&Ping { fail: false })
        .instrument(tracing::info_span!("http.request"))
        .await?;
    let job = client.job(id).await?.expect("the job");
    assert_eq!(job.meta, serde_json::json!({}));
    Ok(())
}
