//! Prepared statements that go stale under live connections, against a real PostgreSQL and
//! a real PgBouncer: a column they return changes type (a migration, an `ALTER TABLE`), or
//! the server session behind a pooler changes (PgBouncer's `RECONNECT`). The server refuses
//! such a statement before it runs; hopper treats that as transient, its pool forgets its
//! prepared statements, and the retry prepares them again, so no operator is needed.

use std::sync::Arc;
use std::time::Duration;

use crate::support::{FnWorker, config, connect, wait_for};
use hopper::backend::{Backend, ClaimParams, Finish, FinishResult, Outcome};
use hopper::testing::{PgBouncer, PgBouncerConfig, TestDatabase};
use hopper::{JobError, JobState, NewJob, PgBackend, PgOptions, Pooler, Runtime, Workers};

job_kind!(Altered, "altered");

/// Adds a column to the job table and changes the type of `queue`, a column the claim, the
/// failure and the promotion statements return (`text` to `varchar(128)`), as a migration
/// would: in one transaction, the views over the column dropped and made again around it.
/// A column added alone changes no result of hopper's statements, which name their columns.
async fn change_the_job_table(db: &TestDatabase) -> anyhow::Result<()> {
    let mut client = connect(db.url()).await?;
    let tx = client.transaction().await?;
    let views = tx
        .query(
            "SELECT c.relname::text, pg_get_viewdef(c.oid)
             FROM pg_class AS c
             JOIN pg_namespace AS n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relkind = 'v'
             ORDER BY c.oid",
            &[&db.schema()],
        )
        .await?;
    let schema = db.schema();
    for view in views.iter().rev() {
        let name: String = view.get(0);
        tx.batch_execute(&format!("DROP VIEW {schema}.{name}"))
            .await?;
    }
    tx.batch_execute(&format!(
        "ALTER TABLE {schema}.jobs ADD COLUMN note text, ALTER COLUMN queue TYPE varchar(128)"
    ))
    .await?;
    for view in &views {
        let (name, definition): (String, String) = (view.get(0), view.get(1));
        tx.batch_execute(&format!("CREATE VIEW {schema}.{name} AS {definition}"))
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

fn claim_of(queue: &str) -> ClaimParams {
    ClaimParams {
        queue: queue.to_owned(),
        node: uuid::Uuid::now_v7(),
        limit: 10,
        lease: Duration::from_secs(30),
        kinds: None,
    }
}

/// The backend's one pooled connection prepared the claim and the failure statements; a
/// column they return then changes type. The first claim after the change fails, as a
/// transient error; the retry, and every call after it, runs.
#[tokio::test]
async fn statements_prepared_before_a_column_changed_type_are_prepared_again() -> anyhow::Result<()>
{
    let db = TestDatabase::new().await?;
    let backend = PgBackend::connect(
        db.url(),
        PgOptions::default()
            .with_schema(db.schema())
            .with_pool_size(1),
    )
    .await?;
    let claim = claim_of("altered");
    let job = NewJob::of(&Altered { n: 1 })?.with_queue("altered");
    backend.job_insert(&job).await?;
    let claimed = backend.job_claim(&claim).await?;
    assert_eq!(claimed.len(), 1);
    let retry = |lease| Finish {
        lease,
        outcome: Outcome::Retry {
            error: "once more".to_owned(),
            retry_in: Duration::ZERO,
            duration_ms: 1,
        },
    };
    let finished = backend.job_finish_many(&[retry(claimed[0].lease)]).await?;
    assert_eq!(finished, [FinishResult::Recorded(JobState::Available)]);

    change_the_job_table(&db).await?;

    let first = backend.job_claim(&claim).await;
    assert!(
        matches!(&first, Err(e) if e.is_transient()),
        "the first claim after the change: {first:?}"
    );
    let again = backend.job_claim(&claim).await?;
    assert_eq!(
        again.iter().map(|j| j.lease.job_id).collect::<Vec<_>>(),
        [job.id]
    );
    let finished = backend.job_finish_many(&[retry(again[0].lease)]).await?;
    assert_eq!(finished, [FinishResult::Recorded(JobState::Available)]);
    let last = backend.job_claim(&claim).await?;
    let done = Finish {
        lease: last[0].lease,
        outcome: Outcome::Completed { duration_ms: 1 },
    };
    assert_eq!(
        backend.job_finish_many(&[done]).await?,
        [FinishResult::Recorded(JobState::Completed)]
    );
    Ok(())
}

/// A runtime whose pooled connections prepared their statements keeps working when the
/// job table changes under it: every job completes, each after one failed attempt (so
/// failures, promotions of retries and claims all run on the changed table), and no
/// background service gives up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_rides_out_a_change_of_the_job_table() -> anyhow::Result<()> {
    const JOBS: u64 = 40;
    let db = TestDatabase::new().await?;
    let backend: Arc<dyn Backend> = Arc::new(
        PgBackend::connect(
            db.url(),
            PgOptions::default()
                .with_schema(db.schema())
                .with_pool_size(4),
        )
        .await?,
    );
    let mut workers = Workers::new();
    workers.register(FnWorker::new(|ctx, _args: Altered| async move {
        match ctx.attempt() {
            1 => Err(JobError::retry("the first attempt fails")),
            _ => Ok(()),
        }
    }));
    let mut config = config("altered", 8);
    config.poll_interval = Duration::from_millis(50);
    let runtime = Runtime::new(backend.clone(), workers, config)
        .start()
        .await?;
    let health = runtime.health();
    let insert = |from: u64| {
        let backend = backend.clone();
        async move {
            for n in from..from + JOBS {
                let job = NewJob::of(&Altered { n })?.with_queue("altered");
                backend.job_insert(&job).await?;
            }
            anyhow::Ok(())
        }
    };

    insert(0).await?;
    let before = wait_for(&db, "altered", Duration::from_secs(30), |s| {
        s.completed == JOBS as i64
    })
    .await;
    let before = match before {
        Ok(stats) => stats,
        Err(e) => {
            runtime.shutdown().await;
            return Err(e);
        }
    };
    assert_eq!(before.failed, 0, "{before:?}");

    change_the_job_table(&db).await?;
    insert(JOBS).await?;
    let after = wait_for(&db, "altered", Duration::from_secs(30), |s| {
        s.completed == 2 * JOBS as i64
    })
    .await;
    let failures = (health.task_failures(), health.failure());
    runtime.shutdown().await;
    let after = after?;
    assert_eq!(after.failed, 0, "{after:?}");
    assert_eq!(failures, (0, None), "a background service failed");
    Ok(())
}

/// hopper with named prepared statements (`Pooler::None`) behind a PgBouncer in transaction
/// mode whose one server connection keeps them while it lives, as a pooler that pins a
/// client to a session does. PgBouncer's `RECONNECT` replaces that session: the statements
/// the pool cached are unknown to the new one. The first call fails as a transient error,
/// and from the retry on the calls run again, the statements prepared anew.
#[tokio::test]
async fn named_statements_are_prepared_again_after_pgbouncer_reconnects() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let bouncer = PgBouncer::start_with(&PgBouncerConfig::default().with_pool_size(1))?;
    let backend = PgBackend::connect(
        bouncer.url(),
        PgOptions::default()
            .with_schema(db.schema())
            .with_pool_size(1)
            .with_pooler(Pooler::None),
    )
    .await?;
    let claim = claim_of("moved");
    let first_job = NewJob::of(&Altered { n: 1 })?.with_queue("moved");
    backend.job_insert(&first_job).await?;
    assert_eq!(backend.job_claim(&claim).await?.len(), 1);
    let session = server_session(&bouncer).await?;

    bouncer.admin("RECONNECT").await?;
    let moved_to = server_session(&bouncer).await?;
    assert_ne!(moved_to, session, "RECONNECT kept the server session");

    let job = NewJob::of(&Altered { n: 2 })?.with_queue("moved");
    let first = backend.job_insert(&job).await;
    assert!(
        matches!(&first, Err(e) if e.is_transient()),
        "the first insert after RECONNECT: {first:?}"
    );
    backend.job_insert(&job).await?;
    let claimed = backend.job_claim(&claim).await?;
    assert_eq!(
        claimed.iter().map(|j| j.lease.job_id).collect::<Vec<_>>(),
        [job.id]
    );
    Ok(())
}

/// The process id of the server session behind `bouncer` (it has one server connection).
async fn server_session(bouncer: &PgBouncer) -> anyhow::Result<i32> {
    let client = connect(bouncer.url()).await?;
    let rows = client.simple_query("SELECT pg_backend_pid()").await?;
    let pid = rows.iter().find_map(|m| match m {
        tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
        _ => None,
    });
    Ok(pid.unwrap_or_default().parse()?)
}

/// The same on the application's own sqlx connection (the `sqlx` feature), whose named
/// statements sqlx caches: after `RECONNECT` the first insert fails as a transient error,
/// the connection forgets its statements, and the retry on the same connection runs.
#[cfg(feature = "sqlx")]
#[tokio::test]
async fn a_sqlx_connection_prepares_its_statements_again_after_pgbouncer_reconnects()
-> anyhow::Result<()> {
    use sqlx_core::connection::Connection;

    let db = TestDatabase::new().await?;
    let bouncer = PgBouncer::start_with(&PgBouncerConfig::default().with_pool_size(1))?;
    let mut conn =
        sqlx_postgres::PgConnection::connect(&format!("{}?sslmode=disable", bouncer.url())).await?;
    let jobs = db.pg().sqlx();
    let job = |n| NewJob::of(&Altered { n }).map(|j| j.with_queue("moved"));
    jobs.insert(&mut conn, &job(1)?).await?;
    let session = server_session(&bouncer).await?;

    bouncer.admin("RECONNECT").await?;
    assert_ne!(server_session(&bouncer).await?, session);

    let second = job(2)?;
    let first = jobs.insert(&mut conn, &second).await;
    assert!(
        matches!(&first, Err(e) if e.is_transient()),
        "the first insert after RECONNECT: {first:?}"
    );
    jobs.insert(&mut conn, &second).await?;
    assert_eq!(db.queue_stats("moved").await?.available, 2);
    Ok(())
}
