//! What only PostgreSQL offers: enqueueing from SQL, the table's own constraints, and
//! enqueueing or completing inside the caller's transaction.

use std::sync::Arc;
use std::time::Duration;

use crate::support::{FnWorker, config, connect, wait_for};
use hopper::backend::{JobCancelParams, JobGetParams, Wakeup};
use hopper::testing::{
    ExpectedJob, TestDatabase, require_inserted_in, require_many_inserted, require_not_inserted,
};
use hopper::{
    Client, Error, JobArgs, JobListParams, JobState, NewJob, Runtime, TestClock, Workers,
};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_postgres::error::SqlState;

job_kind!(FromSql, "from_sql");

async fn job_count(db: &TestDatabase) -> anyhow::Result<usize> {
    let all = db
        .backend()
        .job_list(&JobListParams {
            limit: 1000,
            ..JobListParams::default()
        })
        .await?;
    Ok(all.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_enqueued_from_sql_is_run_by_a_runtime() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = connect(db.url()).await?;
    let row = client
        .query_one(
            &format!(
                "SELECT {}.enqueue('from_sql', '{{\"n\": 41}}'::jsonb, 'sqlq')",
                db.schema()
            ),
            &[],
        )
        .await?;
    let id: uuid::Uuid = row.get(0);
    assert_eq!(id.get_version_num(), 7, "ids made in SQL are UUIDv7 too");
    let job = db
        .backend()
        .job_get(&JobGetParams { id })
        .await?
        .expect("the job exists");
    assert_eq!(job.state, JobState::Available);
    assert_eq!(
        (job.queue.as_str(), job.kind.as_str()),
        ("sqlq", "from_sql")
    );
    assert_eq!(job.args, json!({ "n": 41 }));
    assert_eq!((job.max_attempts, job.timeout_ms), (25, 1_800_000));

    let (seen_tx, mut seen) = mpsc::unbounded_channel();
    let mut workers = Workers::new();
    workers.register(FnWorker::new(move |ctx, args: FromSql| {
        let seen_tx = seen_tx.clone();
        async move {
            let _ = seen_tx.send((ctx.id(), args.n));
            Ok(())
        }
    }));
    let handle = Runtime::new(db.backend(), workers, config("sqlq", 2))
        .start()
        .await?;
    let run = tokio::time::timeout(Duration::from_secs(10), seen.recv()).await?;
    assert_eq!(run, Some((id, 41)));
    wait_for(&db, "sqlq", Duration::from_secs(10), |s| s.completed == 1).await?;
    handle.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn sql_enqueue_takes_options_and_schedules_future_jobs() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = connect(db.url()).await?;
    let schema = db.schema();
    let later: uuid::Uuid = client
        .query_one(
            &format!(
                "SELECT {schema}.enqueue('from_sql', '[1, 2]', 'sqlq', priority => 1::smallint,
                    run_at => now() + interval '1 hour', max_attempts => 3,
                    timeout => interval '90 seconds')"
            ),
            &[],
        )
        .await?
        .get(0);
    let past: uuid::Uuid = client
        .query_one(
            &format!("SELECT {schema}.enqueue('from_sql', run_at => now() - interval '1 minute')"),
            &[],
        )
        .await?
        .get(0);
    let jobs = require_many_inserted(
        &Client::new(db.backend()),
        &[
            ExpectedJob::kind("from_sql")
                .args(json!([1, 2]))
                .queue("sqlq")
                .priority(hopper::Priority::HIGH)
                .max_attempts(3)
                .state(JobState::Scheduled),
            ExpectedJob::kind("from_sql")
                .args(json!({}))
                .queue("default")
                .state(JobState::Available),
        ],
    )
    .await?;
    assert_eq!((jobs[0].id, jobs[0].timeout_ms), (later, 90_000));
    assert_eq!(jobs[1].id, past);
    // The psql view shows both.
    let rows = client
        .query(
            &format!("SELECT state::text FROM {schema}.job_view ORDER BY run_at"),
            &[],
        )
        .await?;
    let states: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(states, vec!["available", "scheduled"]);
    Ok(())
}

#[tokio::test]
async fn the_table_and_sql_enqueue_refuse_bad_input() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = connect(db.url()).await?;
    let schema = db.schema();
    let check = SqlState::CHECK_VIOLATION;
    // hopper.enqueue checks every argument itself (migrations 0004 and 0007), with a
    // message naming it; the table keeps the checks that cost nothing measurable, for rows
    // written by hand.
    let name = SqlState::INVALID_PARAMETER_VALUE;
    let bad_calls = [
        (
            format!("SELECT {schema}.enqueue('k', '{{}}', 'it''s')"),
            &name,
        ),
        (
            format!("SELECT {schema}.enqueue('k', '{{}}', 'a;b')"),
            &name,
        ),
        (
            format!("SELECT {schema}.enqueue('k', '{{}}', 'two words')"),
            &name,
        ),
        (format!("SELECT {schema}.enqueue('k', '{{}}', '')"), &name),
        (format!("SELECT {schema}.enqueue('k', '{{}}', NULL)"), &name),
        (
            format!("SELECT {schema}.enqueue('k', '{{}}', repeat('q', 129))"),
            &name,
        ),
        (
            format!("SELECT {schema}.enqueue('bad kind', '{{}}')"),
            &name,
        ),
        (
            format!("SELECT {schema}.enqueue('k', group_key => 'g<script>')"),
            &name,
        ),
        (
            format!("SELECT {schema}.enqueue('k', '\"a string\"')"),
            &name,
        ),
        (format!("SELECT {schema}.enqueue('k', '42')"), &name),
        (
            format!("SELECT {schema}.enqueue('k', max_attempts => 0)"),
            &name,
        ),
        (
            format!("SELECT {schema}.enqueue('k', timeout => interval '0 seconds')"),
            &name,
        ),
        (
            format!(
                "INSERT INTO {schema}.jobs (id, kind, args) VALUES (gen_random_uuid(), 'k', 'null')"
            ),
            &check,
        ),
        (
            format!("SELECT {schema}.enqueue('k', jsonb_build_object('b', repeat('x', 1048576)))"),
            &SqlState::INVALID_PARAMETER_VALUE,
        ),
    ];
    for (sql, code) in bad_calls {
        let err = client.batch_execute(&sql).await.expect_err(&sql);
        assert_eq!(err.code(), Some(code), "{sql}: {err:?}");
    }
    // The same refusals, through the backend, become InvalidInput with the reason.
    let err = client
        .query_one(&format!("SELECT {schema}.enqueue('k', '{{}}', 'a b')"), &[])
        .await
        .expect_err("refused");
    let mapped = hopper_postgres::map_pg(err);
    assert!(matches!(mapped, Error::InvalidInput(_)), "{mapped:?}");
    assert!(
        mapped
            .to_string()
            .contains(r#"queue name "a b" has the character ' '"#),
        "{mapped}"
    );
    assert_eq!(job_count(&db).await?, 0, "nothing was written");
    // Good names of every shape the rule allows still go in.
    client
        .batch_execute(&format!(
            "SELECT {schema}.enqueue('a.B-c_9:x', '{{}}', 'Q.1-2_3:4', group_key => 'g-1')"
        ))
        .await?;
    assert_eq!(job_count(&db).await?, 1);
    Ok(())
}

#[tokio::test]
async fn insert_in_a_transaction_commits_or_rolls_back_with_it() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let hopper = Client::new(db.backend());
    let pg = db.pg();
    let mut conn = connect(db.url()).await?;
    conn.batch_execute("CREATE TEMP TABLE orders (id int)")
        .await?;

    // Commit: the job and the caller's own row appear together.
    let tx = conn.transaction().await?;
    tx.execute("INSERT INTO orders VALUES (1)", &[]).await?;
    let kept = NewJob::new("ship", json!({ "order": 1 }));
    pg.insert_in(&tx, &kept).await?;
    let kept = kept.id;
    let typed = pg.enqueue_in(&tx, &FromSql { n: 1 }).await?;
    let many: Vec<NewJob> = (0..50)
        .map(|n| NewJob::new("ship", json!({ "n": n })))
        .collect();
    pg.insert_many_in(&tx, &many).await?;
    // The transaction sees its own jobs; nobody else does yet.
    let seen = require_inserted_in(pg, &tx, ExpectedJob::of(&FromSql { n: 1 })).await?;
    assert_eq!(seen.id, typed);
    require_inserted_in(
        pg,
        &tx,
        ExpectedJob::kind("ship").args_containing(json!({ "n": 49 })),
    )
    .await?;
    require_not_inserted(&hopper, ExpectedJob::kind("ship")).await?;
    assert_eq!(
        db.backend().job_get(&JobGetParams { id: kept }).await?,
        None,
        "invisible before commit"
    );
    assert_eq!(job_count(&db).await?, 0);
    tx.commit().await?;
    assert_eq!(job_count(&db).await?, 52);
    assert!(
        db.backend()
            .job_get(&JobGetParams { id: typed })
            .await?
            .is_some()
    );

    // Rollback: none of them exist.
    let tx = conn.transaction().await?;
    let dropped = NewJob::new("ship", json!({ "order": 2 }));
    pg.insert_in(&tx, &dropped).await?;
    let dropped = dropped.id;
    let many: Vec<NewJob> = (0..50)
        .map(|n| NewJob::new("ship", json!({ "n": n })))
        .collect();
    pg.insert_many_in(&tx, &many).await?;
    require_inserted_in(
        pg,
        &tx,
        ExpectedJob::kind("ship").args(json!({ "order": 2 })),
    )
    .await?;
    tx.rollback().await?;
    require_not_inserted(
        &hopper,
        ExpectedJob::kind("ship").args(json!({ "order": 2 })),
    )
    .await?;
    assert_eq!(
        db.backend().job_get(&JobGetParams { id: dropped }).await?,
        None
    );
    assert_eq!(
        db.backend()
            .job_get(&JobGetParams { id: many[0].id })
            .await?,
        None
    );
    assert_eq!(job_count(&db).await?, 52);

    // A bad job inside the caller's transaction is refused before anything is sent.
    let tx = conn.transaction().await?;
    let err = pg
        .insert_in(&tx, &NewJob::new("ship", json!("scalar")))
        .await
        .expect_err("refused");
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    tx.execute("INSERT INTO orders VALUES (3)", &[]).await?;
    tx.commit().await?;
    assert_eq!(job_count(&db).await?, 52);
    Ok(())
}

#[tokio::test]
async fn complete_in_follows_the_callers_transaction_and_checks_the_lease() -> anyhow::Result<()> {
    let clock = TestClock::new(chrono::Utc::now());
    let db = TestDatabase::with_clock(Arc::new(clock.clone())).await?;
    let backend = db.backend();
    let node = uuid::Uuid::now_v7();
    let job = NewJob::new(FromSql::KIND, json!({ "n": 1 }));
    backend.job_insert(&job).await?;
    let claim = |lease| hopper::backend::ClaimParams {
        queue: "default".into(),
        node,
        limit: 1,
        lease,
        kinds: None,
    };
    let first = backend.job_claim(&claim(Duration::from_secs(10))).await?;
    let stale = first[0].lease;
    let mut conn = connect(db.url()).await?;

    // Rolled back: the job is still running under its lease.
    let tx = conn.transaction().await?;
    db.pg().complete_in(&tx, stale, 3).await?;
    tx.rollback().await?;
    assert_eq!(
        backend
            .job_get(&JobGetParams { id: job.id })
            .await?
            .map(|j| j.state),
        Some(JobState::Running)
    );

    // Expired, rescued, claimed again: the old lease is refused, inside a transaction too.
    clock.advance(chrono::Duration::seconds(11));
    let store = backend
        .maintenance()
        .ok_or_else(|| anyhow::anyhow!("PostgreSQL does maintenance"))?;
    assert_eq!(store.job_rescue_expired().await?, 1);
    let current = backend.job_claim(&claim(Duration::from_secs(10))).await?[0].lease;
    let before = backend.job_get(&JobGetParams { id: job.id }).await?;
    let tx = conn.transaction().await?;
    match db.pg().complete_in(&tx, stale, 3).await {
        Err(Error::LeaseLost(lease)) => assert_eq!(lease, stale),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    tx.commit().await?;
    assert_eq!(
        backend.job_get(&JobGetParams { id: job.id }).await?,
        before,
        "nothing changed"
    );

    // Committed with the current lease: completed.
    let tx = conn.transaction().await?;
    db.pg().complete_in(&tx, current, 4).await?;
    tx.commit().await?;
    let done = backend
        .job_get(&JobGetParams { id: job.id })
        .await?
        .expect("exists");
    assert_eq!(done.state, JobState::Completed);
    assert_eq!(done.duration_ms, Some(4));
    Ok(())
}

#[tokio::test]
async fn a_bulk_insert_wakes_each_queue_once_at_commit() -> anyhow::Result<()> {
    use futures_util::StreamExt;

    let db = TestDatabase::new().await?;
    let mut wakeups = db.backend().subscribe().await?;
    let hopper = Client::new(db.backend());
    let mut jobs: Vec<NewJob> = (0..500)
        .map(|n| {
            NewJob::new("k", json!({ "n": n })).with_queue(if n % 2 == 0 { "even" } else { "odd" })
        })
        .collect();
    // Jobs due later wake nobody.
    jobs.push(
        NewJob::new("k", json!({}))
            .with_queue("later")
            .with_run_at(chrono::Utc::now() + chrono::Duration::hours(1)),
    );
    hopper.insert_many(&jobs).await?;
    // A last single insert marks the end: notifications arrive in commit order.
    hopper
        .insert(NewJob::new("k", json!({})).with_queue("marker"))
        .await?;
    let mut seen = Vec::new();
    loop {
        let next = tokio::time::timeout(Duration::from_secs(10), wakeups.next()).await?;
        match next {
            Some(Wakeup::Jobs(queue)) if queue == "marker" => break,
            Some(Wakeup::Jobs(queue)) => seen.push(queue),
            Some(other) => panic!("unexpected {other:?}"),
            None => panic!("the wake-up stream ended"),
        }
    }
    seen.sort();
    assert_eq!(seen, vec!["even", "odd"], "one wake-up per due queue");
    Ok(())
}

#[tokio::test]
async fn a_failed_bulk_insert_leaves_the_pool_clean() -> anyhow::Result<()> {
    // One pooled connection, so every call below gets the connection the failed one used
    // (the bulk insert pipelines BEGIN, COPY and COMMIT on a pooled connection of its own),
    // and no call may need a second connection while it holds that one.
    let db = TestDatabase::new().await?;
    let hopper = Client::new(crate::support::node_backend(&db, 1).await?);
    // Counted from another connection: only what was committed.
    let other = connect(db.url()).await?;
    let count = format!("SELECT count(*) FROM {}.jobs", db.schema());
    for round in 0..3_i64 {
        // Refused by the table itself (a duplicate id), mid-COPY: nothing is written.
        let mut jobs: Vec<NewJob> = (0..1_000)
            .map(|n| NewJob::new("k", json!({ "n": n, "round": round })))
            .collect();
        jobs[999].id = jobs[10].id;
        assert!(
            hopper.insert_many(&jobs).await.is_err(),
            "a duplicate id is refused"
        );
        assert_eq!(
            other.query_one(&count, &[]).await?.get::<_, i64>(0),
            round * 500
        );
        // The next calls work and commit: they did not inherit an open or aborted
        // transaction.
        let ok: Vec<NewJob> = (0..500)
            .map(|n| NewJob::new("k", json!({ "n": n })))
            .collect();
        hopper.insert_many(&ok[..499]).await?;
        hopper.insert(ok[499].clone()).await?;
        assert_eq!(
            other.query_one(&count, &[]).await?.get::<_, i64>(0),
            (round + 1) * 500
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bulk_insert_cancelled_mid_copy_leaves_the_pool_clean() -> anyhow::Result<()> {
    // A caller's select! or timeout may drop the insert while its transaction is open; the
    // pool's only connection must not come back inside it.
    let db = TestDatabase::new().await?;
    let hopper = Client::new(crate::support::node_backend(&db, 1).await?);
    let other = connect(db.url()).await?;
    let big: Vec<NewJob> = (0..200_000)
        .map(|n| NewJob::new("k", json!({ "n": n })))
        .collect();
    let copying = format!(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND query LIKE 'COPY {}.jobs%'
           AND state IN ('active', 'idle in transaction')",
        db.schema()
    );
    tokio::select! {
        r = hopper.insert_many(&big) => panic!("the insert ended before it was cancelled: {r:?}"),
        r = async {
            // Until the COPY is under way (a bounded wait).
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            while other.query_one(&copying, &[]).await?.get::<_, i64>(0) == 0 {
                anyhow::ensure!(tokio::time::Instant::now() < deadline, "the COPY never started");
            }
            anyhow::Ok(())
        } => r?,
    }
    // The insert was dropped mid-COPY: nothing of it is committed, and the next calls on
    // the pool of one work and commit.
    let count = format!("SELECT count(*) FROM {}.jobs", db.schema());
    let small: Vec<NewJob> = (0..10)
        .map(|n| NewJob::new("k", json!({ "n": n })))
        .collect();
    hopper.insert_many(&small).await?;
    hopper.insert(NewJob::new("k", json!({}))).await?;
    assert_eq!(other.query_one(&count, &[]).await?.get::<_, i64>(0), 11);
    Ok(())
}

#[tokio::test]
async fn unfinished_jobs_counts_every_unfinished_state_of_every_queue() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let backend = db.backend();
    let client = connect(db.url()).await?;
    let unfinished = || async {
        let row = client
            .query_one(&format!("SELECT {}.unfinished_jobs()", db.schema()), &[])
            .await?;
        anyhow::Ok(row.get::<_, i64>(0))
    };
    assert_eq!(unfinished().await?, 0, "an empty table");

    let job = |n: u64, queue: &str| NewJob::new(FromSql::KIND, json!({ "n": n })).with_queue(queue);
    for n in 0..4 {
        backend.job_insert(&job(n, "qa")).await?;
    }
    backend.job_insert(&job(4, "qb")).await?;
    backend
        .job_insert(&job(5, "qb").with_delay(Duration::from_secs(3600)))
        .await?;
    let cancelled = job(6, "qb");
    backend.job_insert(&cancelled).await?;
    backend
        .job_cancel(&JobCancelParams { id: cancelled.id })
        .await?;
    assert_eq!(unfinished().await?, 6, "5 available and 1 scheduled");

    let claim = |queue: &str, limit| hopper::backend::ClaimParams {
        queue: queue.into(),
        node: uuid::Uuid::now_v7(),
        limit,
        lease: Duration::from_secs(60),
        kinds: None,
    };
    let running = backend.job_claim(&claim("qa", 2)).await?;
    assert_eq!(unfinished().await?, 6, "running jobs are unfinished too");
    let mut conn = connect(db.url()).await?;
    let tx = conn.transaction().await?;
    db.pg().complete_in(&tx, running[0].lease, 1).await?;
    tx.commit().await?;
    assert_eq!(unfinished().await?, 5, "a completed job is finished");

    let by_scan = client
        .query_one(
            &format!(
                "SELECT count(*) FROM {}.jobs WHERE state IN ('scheduled', 'available', 'running')",
                db.schema()
            ),
            &[],
        )
        .await?
        .get::<_, i64>(0);
    assert_eq!(
        unfinished().await?,
        by_scan,
        "the same count as a plain scan"
    );
    Ok(())
}

#[tokio::test]
async fn any_unfinished_jobs_is_true_while_one_job_is_unfinished() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let backend = db.backend();
    let client = connect(db.url()).await?;
    let any = || async {
        let row = client
            .query_one(
                &format!("SELECT {}.any_unfinished_jobs()", db.schema()),
                &[],
            )
            .await?;
        anyhow::Ok(row.get::<_, bool>(0))
    };
    assert!(!any().await?, "an empty table");

    let job = |n: u64| NewJob::new(FromSql::KIND, json!({ "n": n }));
    let cancelled = job(0);
    backend.job_insert(&cancelled).await?;
    backend
        .job_cancel(&JobCancelParams { id: cancelled.id })
        .await?;
    assert!(!any().await?, "only a cancelled job");

    let scheduled = job(1).with_delay(Duration::from_secs(3600));
    backend.job_insert(&scheduled).await?;
    assert!(any().await?, "a scheduled job alone");
    backend
        .job_cancel(&JobCancelParams { id: scheduled.id })
        .await?;
    assert!(!any().await?, "the scheduled job cancelled");

    backend.job_insert(&job(2).with_queue("other")).await?;
    assert!(any().await?, "an available job of another queue");
    let claimed = backend
        .job_claim(&hopper::backend::ClaimParams {
            queue: "other".into(),
            node: uuid::Uuid::now_v7(),
            limit: 1,
            lease: Duration::from_secs(60),
            kinds: None,
        })
        .await?;
    assert_eq!(claimed.len(), 1);
    assert!(any().await?, "a running job alone");

    let mut conn = connect(db.url()).await?;
    let tx = conn.transaction().await?;
    db.pg().complete_in(&tx, claimed[0].lease, 1).await?;
    tx.commit().await?;
    assert!(!any().await?, "every job finished");
    Ok(())
}
