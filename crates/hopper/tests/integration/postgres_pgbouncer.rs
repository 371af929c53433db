//! hopper behind a real PgBouncer in transaction mode (`Pooler::Transaction`): the storage
//! conformance suite, migrations, a drain by a runtime, wake-ups on the direct URL; and
//! what goes wrong there without the setting.
//!
//! The conformance cases run through a PgBouncer that discards every server session's
//! state after each transaction (`PgBouncerConfig::discard_all`), so anything that relied
//! on session state (a prepared statement, a setting, a lock, a LISTEN) fails every time,
//! not only when the pooler happens to switch server connections.

use std::sync::Arc;
use std::time::Duration;

use crate::support::{FnWorker, SchemaGuard, config, connect, fresh_schema_name, wait_for};
use futures_util::StreamExt;
use hopper::backend::{Backend, ClaimParams, JobGetParams, Wakeup};
use hopper::testing::{PgBouncer, PgBouncerConfig, TestDatabase};
use hopper::{
    Client, NewJob, PgBackend, PgOptions, Pooler, Runtime, SystemClock, TestClock, Workers,
};
use hopper_conformance::{Harness, conformance_suite};

job_kind!(Drained, "drained");

/// A PgBouncer that keeps nothing of a session between transactions.
fn strict_bouncer(pool_size: u32) -> anyhow::Result<PgBouncer> {
    let config = PgBouncerConfig::default()
        .with_pool_size(pool_size)
        .with_discard_all(true);
    Ok(PgBouncer::start_with(&config)?)
}

async fn through_pgbouncer() -> anyhow::Result<Harness> {
    let clock = TestClock::new(hopper_conformance::t0());
    let db = TestDatabase::with_clock(Arc::new(clock.clone())).await?;
    let bouncer = strict_bouncer(4)?;
    let backend = db
        .behind(&bouncer, Some(db.url()), Arc::new(clock.clone()))
        .await?;
    // Dropped after the backend: the pooler, then the schema.
    Ok(Harness::new(Arc::new(backend), clock, (bouncer, db))
        .await?
        .with_job_holds(hold_job))
}

/// Holds a job's row on a direct connection, past the pooler.
fn hold_job(
    h: &Harness,
    id: hopper::JobId,
) -> futures_util::future::BoxFuture<'_, anyhow::Result<hopper_conformance::JobHold>> {
    Box::pin(async move {
        let (_, db) = h
            .store::<(PgBouncer, TestDatabase)>()
            .ok_or_else(|| anyhow::anyhow!("a PgBouncer harness"))?;
        crate::support::hold_job(db, id).await
    })
}

conformance_suite!(through_pgbouncer);

/// Behind the pooler the three outcome statements share a transaction, which a row-lock
/// timeout rolls back whole: every kind goes the way around held rows.
#[tokio::test]
async fn an_outcome_whose_row_is_held_does_not_stop_its_batch_through_pgbouncer()
-> anyhow::Result<()> {
    let h = through_pgbouncer().await?;
    let (_, db) = h
        .store::<(PgBouncer, TestDatabase)>()
        .expect("a PgBouncer harness");
    crate::postgres_lock_order::outcomes_around_held_rows(&h, db).await
}

/// Behind the pooler a shared writer's log store sends its lock bound around itself, in a
/// transaction of its own.
#[tokio::test]
async fn a_shared_log_store_does_not_wait_on_a_held_log_row_through_pgbouncer() -> anyhow::Result<()>
{
    let h = through_pgbouncer().await?;
    let (_, db) = h
        .store::<(PgBouncer, TestDatabase)>()
        .expect("a PgBouncer harness");
    crate::postgres_lock_order::log_stores_around_held_rows(&h, db).await
}

#[tokio::test]
async fn migrations_run_through_pgbouncer() -> anyhow::Result<()> {
    let bouncer = strict_bouncer(2)?;
    let schema = fresh_schema_name("bouncer_migrate");
    let _guard = SchemaGuard {
        url: hopper::testing::database_url(),
        schema: schema.clone(),
    };
    let backend = PgBackend::connect(
        bouncer.url(),
        PgOptions::default()
            .with_schema(schema)
            .with_pool_size(2)
            .with_pooler(Pooler::Transaction),
    )
    .await?;
    backend.migrate().await?;
    // Twice: the second finds nothing to do.
    backend.migrate().await?;
    let job = NewJob::of(&Drained { n: 1 })?.with_queue("m");
    backend.job_insert(&job).await?;
    assert_eq!(
        backend
            .job_get(&JobGetParams { id: job.id })
            .await?
            .map(|j| j.id),
        Some(job.id)
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_drains_a_queue_through_pgbouncer_by_polling() -> anyhow::Result<()> {
    const JOBS: u64 = 3_000;
    let db = TestDatabase::new().await?;
    let bouncer = PgBouncer::start()?;
    // No direct URL: no LISTEN, the runtime polls.
    let backend = Arc::new(db.behind(&bouncer, None, Arc::new(SystemClock)).await?);
    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|n| NewJob::of(&Drained { n }).map(|j| j.with_queue("drain")))
        .collect::<Result<_, _>>()?;
    // The bulk insert too goes through the pooler (one INSERT … unnest, no COPY).
    Client::new(backend.clone()).insert_many(&jobs).await?;
    let mut workers = Workers::new();
    workers.register(FnWorker::new(|_ctx, _args: Drained| async { Ok(()) }));
    let mut config = config("drain", 32);
    config.poll_interval = Duration::from_millis(100);
    let runtime = Runtime::new(backend, workers, config).start().await?;
    let stats = wait_for(&db, "drain", Duration::from_secs(60), |s| {
        s.completed == JOBS as i64
    })
    .await;
    runtime.shutdown().await;
    let stats = stats?;
    assert_eq!(
        (stats.completed, stats.failed),
        (JOBS as i64, 0),
        "{stats:?}"
    );
    Ok(())
}

#[tokio::test]
async fn wake_ups_come_over_the_direct_url() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let bouncer = PgBouncer::start()?;
    let backend = db
        .behind(&bouncer, Some(db.url()), Arc::new(SystemClock))
        .await?;
    let mut wakeups = backend.subscribe().await?;
    let job = NewJob::of(&Drained { n: 1 })?.with_queue("woken");
    backend.job_insert(&job).await?;
    let wakeup = tokio::time::timeout(Duration::from_secs(10), wakeups.next()).await?;
    assert!(
        matches!(&wakeup, Some(Wakeup::Jobs(queue)) if queue == "woken"),
        "{wakeup:?}"
    );
    Ok(())
}

/// Without the setting, hopper's prepared statements do not survive from one transaction to
/// the next behind the pooler; with it, the same calls work.
#[tokio::test]
async fn named_statements_fail_behind_pgbouncer_without_the_setting() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let bouncer = strict_bouncer(1)?;
    let options = |pooler| {
        PgOptions::default()
            .with_schema(db.schema())
            .with_pool_size(1)
            .with_pooler(pooler)
    };
    let claim = ClaimParams {
        queue: "named".to_owned(),
        node: uuid::Uuid::now_v7(),
        limit: 10,
        lease: Duration::from_secs(30),
        kinds: None,
    };
    let job = NewJob::of(&Drained { n: 1 })?.with_queue("named");

    let unaware = PgBackend::connect(bouncer.url(), options(Pooler::None)).await?;
    let failed = match unaware.job_insert(&job).await {
        Err(e) => format!("{e:?}"),
        Ok(()) => match unaware.job_claim(&claim).await {
            Err(e) => format!("{e:?}"),
            Ok(jobs) => panic!("claimed {} jobs with named statements", jobs.len()),
        },
    };
    assert!(
        failed.contains("prepared statement") && failed.contains("does not exist"),
        "{failed}"
    );
    drop(unaware);

    let aware = PgBackend::connect(bouncer.url(), options(Pooler::Transaction)).await?;
    aware.job_insert(&job).await?;
    let claimed = aware.job_claim(&claim).await?;
    assert_eq!(
        claimed.iter().map(|j| j.lease.job_id).collect::<Vec<_>>(),
        [job.id]
    );
    Ok(())
}

/// Every query's declared parameter types (which unnamed statements send) are the ones the
/// server infers when it prepares the query.
#[tokio::test]
async fn declared_parameter_types_match_the_server() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = connect(db.url()).await?;
    let queries = hopper_postgres::sql::Queries::new(db.schema());
    for (name, query) in queries.all() {
        let statement = client
            .prepare(&query.sql)
            .await
            .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        assert_eq!(statement.params(), query.types.as_slice(), "{name}");
    }
    Ok(())
}
