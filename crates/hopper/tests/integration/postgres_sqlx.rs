//! Enqueueing and completing inside the application's sqlx transaction (the `sqlx`
//! feature), against the real PostgreSQL: a job exists iff the transaction that enqueued it
//! commits; a completion counts iff the handler's transaction commits, and a stale lease
//! completes nothing.

#![cfg(feature = "sqlx")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{FnWorker, wait_for};
use hopper::backend::{ClaimParams, JobGetParams};
use hopper::testing::TestDatabase;
use hopper::{
    Error, InsertOutcome, JobArgs, JobError, JobId, JobState, NewJob, Runtime, TestClock,
    UniquePolicy, Workers,
};
use serde_json::json;
use sqlx_core::connection::Connection;
use sqlx_core::executor::Executor;
use sqlx_core::row::Row;
use sqlx_postgres::PgConnection;

job_kind!(Ship, "ship");

/// A sqlx connection of the test's own to the test database, with a table of the
/// application's (`orders`) in the test's schema.
async fn app_connection(db: &TestDatabase) -> anyhow::Result<PgConnection> {
    let separator = if db.url().contains('?') { '&' } else { '?' };
    let mut conn =
        PgConnection::connect(&format!("{}{separator}sslmode=disable", db.url())).await?;
    conn.execute(
        format!(
            "CREATE TABLE IF NOT EXISTS {}.orders (id bigint PRIMARY KEY, job uuid)",
            db.schema()
        )
        .as_str(),
    )
    .await?;
    Ok(conn)
}

async fn orders(db: &TestDatabase, conn: &mut PgConnection) -> anyhow::Result<Vec<i64>> {
    let rows = conn
        .fetch_all(format!("SELECT id FROM {}.orders ORDER BY id", db.schema()).as_str())
        .await?;
    Ok(rows.iter().map(|r| r.get::<i64, _>(0)).collect())
}

/// The application's own write: an order row, on `conn` (inside its transaction).
async fn add_order(db: &TestDatabase, conn: &mut PgConnection, id: i64) -> anyhow::Result<()> {
    conn.execute(format!("INSERT INTO {}.orders VALUES ({id}, NULL)", db.schema()).as_str())
        .await?;
    Ok(())
}

fn claim(queue: &str) -> ClaimParams {
    ClaimParams {
        queue: queue.into(),
        node: uuid::Uuid::now_v7(),
        limit: 10,
        lease: Duration::from_secs(30),
        kinds: None,
    }
}

#[tokio::test]
async fn an_enqueue_in_a_committed_transaction_is_there_and_runnable() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let mut conn = app_connection(&db).await?;
    let jobs = db.pg().sqlx();

    let mut tx = conn.begin().await?;
    add_order(&db, &mut tx, 1).await?;
    let id = jobs.enqueue(&mut tx, &Ship { n: 1 }).await?;
    assert_eq!(
        db.backend().job_get(&JobGetParams { id }).await?,
        None,
        "invisible before commit"
    );
    tx.commit().await?;

    let job = db
        .backend()
        .job_get(&JobGetParams { id })
        .await?
        .expect("committed");
    assert_eq!(
        (job.kind.as_str(), job.state),
        (Ship::KIND, JobState::Available)
    );
    let claimed = db.backend().job_claim(&claim("default")).await?;
    assert_eq!(
        claimed.iter().map(|j| j.lease.job_id).collect::<Vec<_>>(),
        vec![id]
    );
    Ok(())
}

#[tokio::test]
async fn an_enqueue_in_a_rolled_back_transaction_leaves_nothing() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let mut conn = app_connection(&db).await?;
    let jobs = db.pg().sqlx();

    let mut tx = conn.begin().await?;
    add_order(&db, &mut tx, 1).await?;
    let one = jobs.enqueue(&mut tx, &Ship { n: 1 }).await?;
    let many: Vec<NewJob> = (0..20)
        .map(|n| NewJob::new("ship", json!({ "n": n })))
        .collect();
    jobs.insert_many(&mut tx, &many).await?;
    tx.rollback().await?;

    assert_eq!(db.backend().job_get(&JobGetParams { id: one }).await?, None);
    assert_eq!(
        db.backend()
            .job_get(&JobGetParams { id: many[0].id })
            .await?,
        None
    );
    assert!(db.backend().job_claim(&claim("default")).await?.is_empty());
    assert_eq!(orders(&db, &mut conn).await?, Vec::<i64>::new());

    // A bad job is refused before anything is sent; the transaction goes on.
    let mut tx = conn.begin().await?;
    let err = jobs
        .insert(&mut tx, &NewJob::new("ship", json!("scalar")))
        .await
        .expect_err("refused");
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    add_order(&db, &mut tx, 2).await?;
    tx.commit().await?;
    assert_eq!(orders(&db, &mut conn).await?, vec![2]);
    Ok(())
}

#[tokio::test]
async fn bulk_and_unique_enqueues_follow_the_transaction() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let mut conn = app_connection(&db).await?;
    let jobs = db.pg().sqlx();
    let unique = |n: u64| {
        NewJob::new("ship", json!({ "n": n }))
            .with_unique_key("order-7")
            .with_unique_policy(UniquePolicy::Ignore)
    };

    let mut tx = conn.begin().await?;
    let first = unique(1);
    assert_eq!(jobs.upsert(&mut tx, &first).await?, InsertOutcome::Inserted);
    let batch: Vec<NewJob> = vec![
        NewJob::new("ship", json!({ "n": 2 })),
        unique(3),
        NewJob::new("ship", json!({ "n": 4 })).with_group("tenant-a"),
    ];
    let outcomes = jobs.upsert_many(&mut tx, &batch).await?;
    assert_eq!(
        outcomes,
        vec![
            InsertOutcome::Inserted,
            InsertOutcome::Duplicate { existing: first.id },
            InsertOutcome::Inserted,
        ]
    );
    tx.commit().await?;
    assert!(
        db.backend()
            .job_get(&JobGetParams { id: first.id })
            .await?
            .is_some()
    );
    assert!(
        db.backend()
            .job_get(&JobGetParams { id: batch[0].id })
            .await?
            .is_some()
    );
    assert_eq!(
        db.backend()
            .job_get(&JobGetParams { id: batch[1].id })
            .await?,
        None,
        "a duplicate"
    );
    let grouped = db
        .backend()
        .job_get(&JobGetParams { id: batch[2].id })
        .await?
        .expect("inserted");
    assert_eq!(grouped.group.as_deref(), Some("tenant-a"));

    // On a plain connection (autocommit) a bulk insert is all or nothing too: the new job
    // is written by the same statement, then the taken id fails the batch.
    let fresh = NewJob::new("ship", json!({ "n": 5 }));
    let err = jobs
        .insert_many(&mut conn, &[fresh.clone(), batch[0].clone()])
        .await
        .expect_err("an id that exists");
    assert!(matches!(err, Error::Conflict(_)), "{err:?}");
    assert_eq!(
        db.backend().job_get(&JobGetParams { id: fresh.id }).await?,
        None,
        "rolled back"
    );
    // And inside the caller's transaction it rolls back to a savepoint: the transaction
    // goes on.
    let mut tx = conn.begin().await?;
    let err = jobs
        .insert_many(&mut tx, &[fresh.clone(), batch[0].clone()])
        .await
        .expect_err("an id that exists");
    assert!(matches!(err, Error::Conflict(_)), "{err:?}");
    jobs.insert(&mut tx, &NewJob::new("ship", json!({ "n": 6 })))
        .await?;
    tx.commit().await?;
    assert_eq!(
        db.backend().job_get(&JobGetParams { id: fresh.id }).await?,
        None,
        "rolled back"
    );
    assert_eq!(db.queue_stats("default").await?.available, 4);
    Ok(())
}

#[tokio::test]
async fn a_completion_counts_only_with_its_transaction_and_lease() -> anyhow::Result<()> {
    let clock = TestClock::new(chrono::Utc::now());
    let db = TestDatabase::with_clock(Arc::new(clock.clone())).await?;
    let mut conn = app_connection(&db).await?;
    let backend = db.backend();
    let jobs = db.pg().sqlx();
    let job = NewJob::new("ship", json!({ "n": 1 }));
    backend.job_insert(&job).await?;
    let stale = backend.job_claim(&claim("default")).await?[0].lease;

    // Rolled back with the application's row: the job is still running.
    let mut tx = conn.begin().await?;
    add_order(&db, &mut tx, 1).await?;
    jobs.complete(&mut tx, stale, 3).await?;
    tx.rollback().await?;
    let running = backend
        .job_get(&JobGetParams { id: job.id })
        .await?
        .expect("exists");
    assert_eq!(running.state, JobState::Running);

    // Expired and claimed again: the old lease completes nothing.
    clock.advance(chrono::Duration::seconds(31));
    let maintenance = backend
        .maintenance()
        .ok_or_else(|| anyhow::anyhow!("PostgreSQL rescues expired leases"))?;
    assert_eq!(maintenance.job_rescue_expired().await?, 1);
    let current = backend.job_claim(&claim("default")).await?[0].lease;
    let before = backend.job_get(&JobGetParams { id: job.id }).await?;
    let mut tx = conn.begin().await?;
    match jobs.complete(&mut tx, stale, 3).await {
        Err(Error::LeaseLost(lease)) => assert_eq!(lease, stale),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    tx.commit().await?;
    assert_eq!(
        backend.job_get(&JobGetParams { id: job.id }).await?,
        before,
        "nothing changed"
    );

    // Committed with the current lease: completed, with the application's row.
    let mut tx = conn.begin().await?;
    add_order(&db, &mut tx, 2).await?;
    jobs.complete(&mut tx, current, 4).await?;
    tx.commit().await?;
    let done = backend
        .job_get(&JobGetParams { id: job.id })
        .await?
        .expect("exists");
    assert_eq!(
        (done.state, done.duration_ms),
        (JobState::Completed, Some(4))
    );
    assert_eq!(orders(&db, &mut conn).await?, vec![2]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_completes_inside_its_sqlx_transaction() -> anyhow::Result<()> {
    const QUEUE: &str = "sqlx";
    let db = TestDatabase::new().await?;
    let url = format!(
        "{}{}sslmode=disable",
        db.url(),
        if db.url().contains('?') { '&' } else { '?' }
    );
    drop(app_connection(&db).await?);
    let schema = db.schema().to_owned();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let log = runs.clone();
    let mut workers = Workers::new();
    workers.register(FnWorker::new(move |ctx, args: Ship| {
        let (url, schema, log) = (url.clone(), schema.clone(), log.clone());
        async move {
            log.lock()
                .expect("not poisoned")
                .push((args.n, ctx.attempt()));
            let mut conn = PgConnection::connect(&url).await?;
            let mut tx = conn.begin().await?;
            let order = i64::try_from(args.n * 10).unwrap_or_default() + i64::from(ctx.attempt());
            sqlx_core::query::query::<sqlx_postgres::Postgres>(&format!(
                "INSERT INTO {schema}.orders VALUES ($1, $2)"
            ))
            .bind(order)
            .bind(ctx.id())
            .execute(&mut *tx)
            .await?;
            ctx.complete_in_sqlx(&mut tx)
                .await
                .map_err(JobError::retry)?;
            if args.n == 1 && ctx.attempt() == 1 {
                // The application's write fails after all: the completion rolls back
                // with it, and the job runs again.
                tx.rollback().await?;
                return Err(JobError::retry("rolled back"));
            }
            tx.commit().await?;
            Ok(())
        }
    }));
    let client = hopper::Client::new(db.backend());
    let committed: JobId = client
        .insert(NewJob::of(&Ship { n: 0 })?.with_queue(QUEUE))
        .await?;
    let rolled_back = client
        .insert(NewJob::of(&Ship { n: 1 })?.with_queue(QUEUE))
        .await?;
    let handle = Runtime::new(db.backend(), workers, crate::support::config(QUEUE, 2))
        .start()
        .await?;
    wait_for(&db, QUEUE, Duration::from_secs(10), |s| s.completed == 2).await?;
    handle.shutdown().await;

    let job = db
        .backend()
        .job_get(&JobGetParams { id: committed })
        .await?
        .expect("exists");
    assert_eq!((job.state, job.attempt), (JobState::Completed, 1));
    let job = db
        .backend()
        .job_get(&JobGetParams { id: rolled_back })
        .await?
        .expect("exists");
    assert_eq!((job.state, job.attempt), (JobState::Completed, 2));
    assert_eq!(job.errors.len(), 1);
    let mut conn = app_connection(&db).await?;
    assert_eq!(
        orders(&db, &mut conn).await?,
        vec![1, 12],
        "one write per completion"
    );
    let mut runs = runs.lock().expect("not poisoned").clone();
    runs.sort();
    assert_eq!(runs, vec![(0, 1), (1, 1), (1, 2)], "each attempt ran once");
    Ok(())
}
