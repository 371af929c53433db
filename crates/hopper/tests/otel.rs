//! OpenTelemetry (`hopper::otel`) captured with the SDK's in-memory exporter: a request
//! span of the application, the enqueue inside it and the job's attempt on a real
//! runtime (SQLite) form one trace, parent to child; the spans carry their documented
//! fields, kinds and status; the storage calls have spans too.
//!
//! A test binary of its own, apart from `tests/integration`: it sets the process's global
//! tracer provider.

use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use hopper::backend::Backend;
use hopper::otel::{OtelMiddleware, QueueGauges, Telemetry};
use hopper::testing::TestDatabase;
use hopper::{
    Client, JobArgs, JobContext, JobError, JobListParams, NewJob, PeriodicJob, Runtime,
    RuntimeConfig, SqliteBackend, SqliteOptions, TestClock, Worker, Workers,
};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
use opentelemetry_sdk::metrics::{InMemoryMetricExporter, SdkMeterProvider};
use opentelemetry_sdk::trace::{InMemorySpanExporter, Sampler, SdkTracerProvider, SpanData};
use serde::{Deserialize, Serialize};
use sqlx_core::connection::Connection;
use sqlx_postgres::PgConnection;
use tokio::sync::mpsc;
use tokio_postgres::NoTls;
use tracing::Instrument;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;

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
/// answers what it returned and every span it finished.
async fn captured<T, F: Future<Output = anyhow::Result<T>>>(
    work: impl FnOnce(OtelMiddleware) -> F,
) -> anyhow::Result<(T, Vec<SpanData>)> {
    captured_with(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)), work).await
}

/// [`captured`], sampling with `sampler`.
async fn captured_with<T, F: Future<Output = anyhow::Result<T>>>(
    sampler: Sampler,
    work: impl FnOnce(OtelMiddleware) -> F,
) -> anyhow::Result<(T, Vec<SpanData>)> {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .with_sampler(sampler)
        .build();
    let telemetry = Telemetry::from_providers(Some(provider.clone()), None);
    let filter = EnvFilter::new("hopper::spans=debug,otel=info");
    let subscriber = tracing_subscriber::registry().with(telemetry.layer(filter));
    let value = {
        let _default = tracing::subscriber::set_default(subscriber);
        work(telemetry.middleware()).await?
    };
    provider.force_flush()?;
    Ok((value, exporter.get_finished_spans()?))
}

async fn sqlite() -> anyhow::Result<Arc<dyn Backend>> {
    let backend: Arc<dyn Backend> =
        Arc::new(SqliteBackend::open_in_memory(SqliteOptions::default()).await?);
    backend.migrate().await?;
    Ok(backend)
}

/// Enqueues `jobs` inside a request span with the middleware, then runs them on a runtime
/// with the middleware and a [`Pinger`] until each has run once.
async fn enqueue_and_run(otel: OtelMiddleware, jobs: Vec<NewJob>) -> anyhow::Result<()> {
    enqueue_and_run_with(otel, jobs, |workers, done| {
        workers.register(Pinger(done));
    })
    .await
}

/// [`enqueue_and_run`], with the workers `register` adds, each saying on `done` that it ran.
async fn enqueue_and_run_with(
    otel: OtelMiddleware,
    jobs: Vec<NewJob>,
    register: impl FnOnce(&mut Workers, mpsc::UnboundedSender<()>),
) -> anyhow::Result<()> {
    let backend = sqlite().await?;
    let client = Client::new(backend.clone()).with_middleware(otel.clone());
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
    register(&mut workers, done);
    workers.middleware(otel);
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
    let ((), spans) = captured(|otel| enqueue_and_run(otel, jobs)).await?;

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
    let ((), spans) = captured(|otel| enqueue_and_run(otel, jobs)).await?;

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

#[derive(Serialize, Deserialize)]
struct Traced {}

impl JobArgs for Traced {
    const KIND: &'static str = "traced";
}

/// Does its work inside a span of its own, as an instrumented handler does.
struct TracedWorker(mpsc::UnboundedSender<()>);

#[async_trait::async_trait]
impl Worker for TracedWorker {
    type Args = Traced;

    async fn process(&self, _ctx: &JobContext, _args: Traced) -> Result<(), JobError> {
        async { tokio::task::yield_now().await }
            .instrument(tracing::info_span!("handler.work"))
            .await;
        let _ = self.0.send(());
        Ok(())
    }
}

/// The spans a handler makes are children of its attempt's span, which the middleware
/// makes with the SDK's tracer (the bridge leaves `hopper.job` to it).
#[tokio::test]
async fn a_handlers_spans_are_children_of_its_attempt() -> anyhow::Result<()> {
    let jobs = vec![NewJob::of(&Traced {})?];
    let ((), spans) = captured(|otel| {
        enqueue_and_run_with(otel, jobs, |workers, done| {
            workers.register(TracedWorker(done));
        })
    })
    .await?;

    let [job] = named(&spans, "hopper.job")[..] else {
        panic!("one job span, not one from the bridge too: {spans:#?}");
    };
    let [work] = named(&spans, "handler.work")[..] else {
        panic!("one handler span: {spans:#?}");
    };
    assert_eq!(work.span_context.trace_id(), job.span_context.trace_id());
    assert_eq!(work.parent_span_id, job.span_context.span_id());
    assert!(!work.parent_span_is_remote);
    assert_eq!(text(job, "kind"), "traced");
    Ok(())
}

/// The sampler decides an attempt's span from the parent stored in the job: with roots
/// sampled out, only the job whose stored context is sampled has a span, in that trace.
#[tokio::test]
async fn an_attempt_is_sampled_by_its_stored_parent() -> anyhow::Result<()> {
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let mut sampled = NewJob::of(&Ping { fail: false })?;
    sampled.meta.insert(
        "traceparent".to_owned(),
        format!("00-{trace}-{parent}-01").into(),
    );
    let jobs = vec![sampled, NewJob::of(&Ping { fail: false })?];
    let ((), spans) = captured_with(Sampler::ParentBased(Box::new(Sampler::AlwaysOff)), |otel| {
        enqueue_and_run(otel, jobs)
    })
    .await?;

    let [job] = named(&spans, "hopper.job")[..] else {
        panic!("one job span: {spans:#?}");
    };
    assert_eq!(job.span_context.trace_id(), TraceId::from_hex(trace)?);
    assert_eq!(job.parent_span_id, SpanId::from_hex(parent)?);
    assert_eq!(text(job, "outcome"), "completed");
    Ok(())
}

/// `OtelMiddleware::new()` uses the global tracer provider as it is at each attempt, so a
/// middleware made before the provider was installed still exports. The only test here
/// that sets the global provider: the others give theirs to the middleware.
#[tokio::test]
async fn the_global_provider_is_taken_at_each_attempt() -> anyhow::Result<()> {
    let otel = OtelMiddleware::new();
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());

    // No OpenTelemetry layer here: the request span has no context, the job none stored.
    enqueue_and_run(otel, vec![NewJob::of(&Ping { fail: false })?]).await?;
    provider.force_flush()?;

    let spans = exporter.get_finished_spans()?;
    let [job] = named(&spans, "hopper.job")[..] else {
        panic!("one job span: {spans:#?}");
    };
    assert_eq!(text(job, "outcome"), "completed");
    assert_eq!(
        job.parent_span_id,
        SpanId::INVALID,
        "a root: no stored context"
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

fn all_jobs() -> JobListParams {
    JobListParams {
        limit: 100,
        ..JobListParams::default()
    }
}

/// The span context a job's meta carries (`meta.traceparent`): trace id and parent span id.
fn stored_context(meta: &serde_json::Value) -> (TraceId, SpanId) {
    let traceparent = meta["traceparent"].as_str().unwrap_or_default();
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "a W3C traceparent in {meta}");
    (
        TraceId::from_hex(parts[1]).expect("a trace id"),
        SpanId::from_hex(parts[2]).expect("a span id"),
    )
}

/// A tick of a periodic job is enqueued inside a `hopper.periodic` span through the
/// runtime's middleware: the job's meta names the entry and carries the span's context,
/// and the job's attempt is the span's child. Driven by an injected clock.
#[tokio::test]
async fn a_periodic_tick_is_a_span_and_the_parent_of_its_job() -> anyhow::Result<()> {
    let at = |m: u32, s: u32| {
        Utc.with_ymd_and_hms(2031, 1, 1, 0, m, s)
            .single()
            .expect("a valid instant")
    };
    let clock = TestClock::new(at(0, 30));
    let (job, spans) = captured(|otel| async {
        let backend: Arc<dyn Backend> = Arc::new(
            SqliteBackend::open_in_memory(
                SqliteOptions::default().with_clock(Arc::new(clock.clone())),
            )
            .await?,
        );
        backend.migrate().await?;
        let (done, mut ran) = mpsc::unbounded_channel();
        let mut workers = Workers::new();
        workers.register(Pinger(done)).middleware(otel);
        let config = RuntimeConfig::default()
            .with_poll_interval(Duration::from_millis(20))
            .with_clock(Arc::new(clock.clone()));
        let every_minute =
            PeriodicJob::new("pinger", "0 * * * * *", NewJob::of(&Ping { fail: false })?)?;
        let handle = Runtime::new(backend.clone(), workers, config)
            .periodic(every_minute)
            .start()
            .await?;
        let client = Client::new(backend);
        // The tick is planned from the registration: move the clock only once it is in.
        tokio::time::timeout(Duration::from_secs(20), async {
            while client.cron_jobs().await?.is_empty() {
                tokio::task::yield_now().await;
            }
            anyhow::Ok(())
        })
        .await??;
        clock.set(at(1, 0));
        tokio::time::timeout(Duration::from_secs(20), ran.recv()).await?;
        handle.shutdown().await;
        let jobs = client.jobs(&all_jobs()).await?;
        let [job] = &jobs[..] else {
            anyhow::bail!("one job: {jobs:#?}");
        };
        Ok(job.clone())
    })
    .await?;

    assert_eq!(job.meta["periodic"], "pinger", "{}", job.meta);
    let [tick] = named(&spans, "hopper.periodic")[..] else {
        panic!("one tick span: {spans:#?}");
    };
    assert_eq!(text(tick, "periodic"), "pinger");
    assert_eq!(text(tick, "kind"), "ping");
    assert_eq!(text(tick, "outcome"), "ok");
    assert_eq!(attribute(tick, "jobs"), Some(&Value::I64(1)));
    assert_eq!(tick.span_kind, SpanKind::Producer);
    assert_eq!(
        stored_context(&job.meta),
        (tick.span_context.trace_id(), tick.span_context.span_id()),
        "the job carries the tick's context"
    );
    let [attempt] = named(&spans, "hopper.job")[..] else {
        panic!("one job span: {spans:#?}");
    };
    assert_eq!(
        attempt.span_context.trace_id(),
        tick.span_context.trace_id()
    );
    assert_eq!(attempt.parent_span_id, tick.span_context.span_id());
    Ok(())
}

/// Enqueues inside the application's own transaction, on tokio-postgres and on sqlx, run
/// the client's middleware in a `hopper.enqueue` span: the jobs carry the trace context
/// of that span, a child of the request span they were enqueued in.
#[tokio::test]
async fn an_enqueue_inside_a_transaction_runs_the_middleware() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = Client::new(db.backend()).with_middleware(OtelMiddleware::new());
    let plain_url = {
        let separator = if db.url().contains('?') { '&' } else { '?' };
        format!("{}{separator}sslmode=disable", db.url())
    };
    let (ids, spans) = captured(|_| async {
        let (mut conn, connection) = tokio_postgres::connect(&plain_url, NoTls).await?;
        tokio::spawn(connection);
        let mut sqlx_conn = PgConnection::connect(&plain_url).await?;
        let request = tracing::info_span!("http.request");
        async {
            let tx = conn.transaction().await?;
            let one = client
                .insert_in(&tx, NewJob::of(&Ping { fail: false })?)
                .await?;
            client
                .insert_many_in(&tx, &[NewJob::of(&Ping { fail: false })?])
                .await?;
            tx.commit().await?;
            let mut tx = sqlx_conn.begin().await?;
            let two = client
                .insert_in_sqlx(&mut tx, NewJob::of(&Ping { fail: false })?)
                .await?;
            tx.commit().await?;
            anyhow::Ok(vec![one, two])
        }
        .instrument(request)
        .await
    })
    .await?;

    let [request] = named(&spans, "http.request")[..] else {
        panic!("one request span: {spans:#?}");
    };
    let enqueues = named(&spans, "hopper.enqueue");
    assert_eq!(enqueues.len(), 3, "{spans:#?}");
    for enqueue in &enqueues {
        assert_eq!(enqueue.parent_span_id, request.span_context.span_id());
    }
    let all = client.jobs(&all_jobs()).await?;
    assert_eq!(all.len(), 3);
    for job in &all {
        let (trace, parent) = stored_context(&job.meta);
        assert_eq!(trace, request.span_context.trace_id(), "{}", job.meta);
        assert!(
            enqueues.iter().any(|e| e.span_context.span_id() == parent),
            "the job's parent is its enqueue span: {}",
            job.meta
        );
    }
    assert!(ids.iter().all(|id| all.iter().any(|j| j.id == *id)));
    Ok(())
}

/// The queue gauges of `/metrics` as OpenTelemetry gauges, read by the SDK's in-memory
/// exporter: the counts of a known queue state, by queue and state, with the same names
/// and labels as Prometheus shows.
#[tokio::test]
async fn the_queue_gauges_report_the_counts_of_each_queue() -> anyhow::Result<()> {
    let backend = sqlite().await?;
    let client = Client::new(backend.clone());
    for delay in [None, None, Some(Duration::from_secs(3600))] {
        let job = NewJob::of(&Ping { fail: false })?.with_queue("mail");
        client
            .insert(match delay {
                Some(d) => job.with_delay(d),
                None => job,
            })
            .await?;
    }
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_periodic_exporter(exporter.clone())
        .build();
    let gauges = QueueGauges::new(
        &provider.meter("hopper"),
        backend,
        Duration::from_secs(3600),
    );
    gauges.refresh().await?;
    provider.force_flush()?;

    let exported = exporter.get_finished_metrics()?;
    let metric = |name: &str| {
        exported
            .iter()
            .flat_map(|r| r.scope_metrics())
            .flat_map(|s| s.metrics())
            .find(|m| m.name() == name)
            .map(|m| m.data())
    };
    let has = |point: &dyn Fn(&str) -> Option<String>, queue: &str, state: Option<&str>| {
        point("queue").as_deref() == Some(queue) && point("state").as_deref() == state
    };
    let Some(AggregatedMetrics::U64(MetricData::Gauge(jobs))) = metric("hopper_jobs") else {
        panic!("hopper_jobs as a u64 gauge: {exported:#?}");
    };
    let count = |state: &str| {
        jobs.data_points()
            .find(|p| {
                let label = |k: &str| {
                    p.attributes()
                        .find(|kv| kv.key.as_str() == k)
                        .map(|kv| kv.value.as_str().into_owned())
                };
                has(&label, "mail", Some(state))
            })
            .map(|p| p.value())
    };
    assert_eq!(count("available"), Some(2));
    assert_eq!(count("scheduled"), Some(1));
    assert_eq!(count("failed"), Some(0));
    let Some(AggregatedMetrics::F64(MetricData::Gauge(oldest))) =
        metric("hopper_queue_oldest_available_seconds")
    else {
        panic!("hopper_queue_oldest_available_seconds as an f64 gauge: {exported:#?}");
    };
    let ages: Vec<f64> = oldest
        .data_points()
        .filter(|p| {
            let label = |k: &str| {
                p.attributes()
                    .find(|kv| kv.key.as_str() == k)
                    .map(|kv| kv.value.as_str().into_owned())
            };
            has(&label, "mail", None)
        })
        .map(|p| p.value())
        .collect();
    assert_eq!(ages.len(), 1, "{ages:?}");
    assert!((0.0..3600.0).contains(&ages[0]), "{ages:?}");
    Ok(())
}

/// While the database does not answer, the queue gauges report nothing rather than the
/// counts from before the outage (an age that stopped growing would keep alerts quiet).
#[tokio::test]
async fn the_queue_gauges_report_nothing_while_the_database_fails() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    Client::new(db.backend())
        .insert(NewJob::of(&Ping { fail: false })?)
        .await?;
    let exporter = InMemoryMetricExporter::default();
    let provider = SdkMeterProvider::builder()
        .with_periodic_exporter(exporter.clone())
        .build();
    let gauges = QueueGauges::new(
        &provider.meter("hopper"),
        db.backend(),
        Duration::from_secs(3600),
    );
    gauges.refresh().await?;
    let (sql, connection) = tokio_postgres::connect(db.url(), NoTls).await?;
    tokio::spawn(connection);
    sql.batch_execute(&format!(
        "ALTER TABLE {}.jobs RENAME TO jobs_away",
        db.schema()
    ))
    .await?;
    assert!(gauges.refresh().await.is_err(), "the counts cannot be read");
    provider.force_flush()?;
    let points: usize = exporter
        .get_finished_metrics()?
        .iter()
        .flat_map(|r| r.scope_metrics())
        .flat_map(|s| s.metrics())
        .filter(|m| m.name() == "hopper_jobs")
        .map(|m| match m.data() {
            AggregatedMetrics::U64(MetricData::Gauge(g)) => g.data_points().count(),
            _ => 0,
        })
        .sum();
    assert_eq!(points, 0, "no count exported from before the failure");
    sql.batch_execute(&format!(
        "ALTER TABLE {}.jobs_away RENAME TO jobs",
        db.schema()
    ))
    .await?;
    Ok(())
}
