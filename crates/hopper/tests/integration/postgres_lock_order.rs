//! Lease extensions and outcomes each update many job rows in one statement, from different
//! connections of one process (a runtime's heartbeat beside its completer, `hopper serve`
//! extending its workers' leases while their outcomes come in). Each takes its rows' locks
//! in job id order, whatever order its caller gave, so two such statements over the same
//! rows queue behind each other instead of deadlocking (seen in W7 before: "extending
//! leases failed … deadlock detected", each time a second's wait and a retry).
//!
//! And neither a lease extension nor the release of a dead node's jobs waits on a row
//! another transaction holds: the one would stop every other lease of the runtime from
//! being renewed (and the rescuer would take those jobs back), the other every node's
//! rescuer (the node is then kept, and the held job released once free). A batch of outcomes waits at most a moment for one: the held job's outcome is
//! answered held, the others are written, and the runtime's completer writes the held one
//! once the row is free while it goes on with the rest. A hold that outlasts the lease does
//! not let the rescuer take back the job (running, or its outcome waiting): the renewals
//! the row could not take are noted beside it. Advancing a periodic job skips an entry
//! whose row is held, so the other entries' ticks are enqueued. A shared log writer's
//! store skips a held log row, and a runtime's store given up while it waits on one does
//! not leave its connection to the next statement.

use std::sync::Arc;
use std::time::Duration;

use hopper::TestClock;
use hopper::testing::TestDatabase;
use hopper::{Client, NewJob, Runtime};
use hopper_conformance::{Harness, completed, job, retry};
use hopper_core::backend::{Backend, Finish, JobExtendManyParams};
use hopper_core::{CronAdvance, CronEntry, FinishResult, JobState, Outcome, Priority};

use crate::support::{FnWorker, config, eventually, gated_workers, insert_gated, wait_for};

job_kind!(Quick, "quick");

async fn postgres() -> anyhow::Result<Harness> {
    let clock = TestClock::new(hopper_conformance::t0());
    let db = TestDatabase::with_clock(Arc::new(clock.clone())).await?;
    Harness::new(db.backend(), clock, db).await
}

#[tokio::test]
async fn extending_and_finishing_the_same_leases_at_once_never_deadlocks() -> anyhow::Result<()> {
    let h = postgres().await?;
    // A table with statistics, as in production: both statements then probe the primary
    // key once per input row, in input order. (On a table never analysed both scan the
    // heap instead, in one order too; a connection that planned before the statistics and
    // one that planned after could still meet in opposite orders, for a while.)
    let filler: Vec<_> = (0..5_000).map(|_| job("k", "filler")).collect();
    h.backend.job_insert_many(&filler).await?;
    let db = h.store::<TestDatabase>().expect("a TestDatabase harness");
    let sql = crate::support::connect(db.url()).await?;
    sql.batch_execute(&format!("ANALYZE {}.jobs", db.schema()))
        .await?;
    for _round in 0..5 {
        let jobs: Vec<_> = (0..300).map(|_| job("k", "q")).collect();
        h.backend.job_insert_many(&jobs).await?;
        let mut leases: Vec<_> = h.claim("q", 300).await?.iter().map(|j| j.lease).collect();
        assert_eq!(leases.len(), 300);
        // Opposite orders: without the sort in the backend, each statement locks the rows the
        // other wants next, and PostgreSQL breaks the cycle by failing one of them.
        leases.sort_by_key(|l| l.job_id);
        let finishes: Vec<Finish> = leases
            .iter()
            .rev()
            .map(|&lease| Finish {
                lease,
                outcome: completed(),
            })
            .collect();
        let extend = JobExtendManyParams {
            leases: leases.clone(),
            by: Duration::from_secs(60),
        };
        let (extended, finished) = tokio::join!(
            h.backend.job_extend_many(&extend),
            h.backend.job_finish_many(&finishes),
        );
        let said = |e: hopper::Error| anyhow::anyhow!(e.with_causes());
        extended.map_err(said)?;
        for result in finished.map_err(said)? {
            assert_eq!(result, FinishResult::Recorded(JobState::Completed));
        }
    }
    Ok(())
}

/// The lease expiry of job `id`, read on `sql`.
async fn expiry(
    sql: &tokio_postgres::Client,
    schema: &str,
    id: hopper::JobId,
) -> anyhow::Result<chrono::DateTime<chrono::Utc>> {
    let row = sql
        .query_one(
            &format!("SELECT lease_expires_at FROM {schema}.jobs WHERE id = $1"),
            &[&id],
        )
        .await?;
    Ok(row.try_get(0)?)
}

#[tokio::test]
async fn a_lease_held_by_another_transaction_does_not_stop_the_others() -> anyhow::Result<()> {
    let h = postgres().await?;
    let jobs: Vec<_> = (0..3).map(|_| job("k", "q")).collect();
    h.backend.job_insert_many(&jobs).await?;
    let leases: Vec<_> = h.claim("q", 3).await?.iter().map(|j| j.lease).collect();
    let db = h.store::<TestDatabase>().expect("a TestDatabase harness");
    let (sql, holder) = (
        crate::support::connect(db.url()).await?,
        crate::support::connect(db.url()).await?,
    );
    let schema = db.schema();
    let held = leases[1].job_id;
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM {schema}.jobs WHERE id = '{held}' FOR UPDATE"
        ))
        .await?;
    let before = expiry(&sql, schema, leases[0].job_id).await?;
    // Later leases, and one of a job that is not there: that one is lost.
    h.clock.advance(chrono::Duration::seconds(10));
    let mut asked = leases.clone();
    let stale = hopper_core::Lease {
        job_id: uuid::Uuid::now_v7(),
        attempt: 1,
    };
    asked.push(stale);
    let extend = JobExtendManyParams {
        leases: asked,
        by: Duration::from_secs(60),
    };
    let lost = tokio::time::timeout(Duration::from_secs(5), h.backend.job_extend_many(&extend))
        .await
        .map_err(|_| anyhow::anyhow!("the extension waited on the held row"))??;
    assert_eq!(
        lost,
        [stale],
        "the held lease is not lost, the stale one is"
    );
    assert!(expiry(&sql, schema, leases[0].job_id).await? > before);
    assert!(expiry(&sql, schema, leases[2].job_id).await? > before);
    assert_eq!(
        expiry(&sql, schema, held).await?,
        before,
        "not extended while held"
    );

    holder.batch_execute("COMMIT").await?;
    h.clock.advance(chrono::Duration::seconds(10));
    let extend = JobExtendManyParams {
        leases: leases.clone(),
        by: Duration::from_secs(60),
    };
    assert!(h.backend.job_extend_many(&extend).await?.is_empty());
    assert!(
        expiry(&sql, schema, held).await? > before,
        "extended once free"
    );
    Ok(())
}

#[tokio::test]
async fn a_hold_that_outlasts_the_lease_does_not_let_the_rescuer_in() -> anyhow::Result<()> {
    let h = postgres().await?;
    h.backend.job_insert_many(&[job("k", "q")]).await?;
    let lease = h.claim("q", 1).await?[0].lease;
    let db = h.store::<TestDatabase>().expect("a TestDatabase harness");
    let hold = db.hold_job(lease.job_id).await?;
    let extend = JobExtendManyParams {
        leases: vec![lease],
        by: Duration::from_secs(30),
    };
    // Renewed every 10 s while the row stays held past the claim's 30 s lease: each
    // renewal is kept (not lost), though the row itself cannot take it.
    for _ in 0..4 {
        h.clock.advance(chrono::Duration::seconds(10));
        assert!(h.backend.job_extend_many(&extend).await?.is_empty());
    }
    hold.release().await?;
    assert_eq!(
        h.maintenance().job_rescue_expired().await?,
        0,
        "the row's lease expired during the hold, but the job was renewed meanwhile"
    );
    // Renewed no more (its worker gone): taken back once the last renewal expires.
    h.clock.advance(chrono::Duration::seconds(29));
    assert_eq!(h.maintenance().job_rescue_expired().await?, 0);
    h.clock.advance(chrono::Duration::seconds(2));
    assert_eq!(h.maintenance().job_rescue_expired().await?, 1);
    let sql = crate::support::connect(db.url()).await?;
    let notes: i64 = sql
        .query_one(
            &format!("SELECT count(*) FROM {}.held_leases", db.schema()),
            &[],
        )
        .await?
        .get(0);
    assert_eq!(notes, 0, "the rescuer deletes the notes past their time");
    Ok(())
}

/// A renewal noted while the row is held never moves the noted lease earlier either: a
/// heartbeat after a handler's longer extend, both noted, keeps the longer.
#[tokio::test]
async fn a_longer_extend_noted_while_held_is_kept_by_a_later_heartbeat() -> anyhow::Result<()> {
    let h = postgres().await?;
    h.backend.job_insert_many(&[job("k", "q")]).await?;
    let lease = h.claim("q", 1).await?[0].lease;
    let db = h.store::<TestDatabase>().expect("a TestDatabase harness");
    let sql = crate::support::connect(db.url()).await?;
    let hold = db.hold_job(lease.job_id).await?;
    let extend = |secs| JobExtendManyParams {
        leases: vec![lease],
        by: Duration::from_secs(secs),
    };
    assert!(h.backend.job_extend_many(&extend(3600)).await?.is_empty());
    let until = noted(&sql, db.schema(), lease.job_id).await?;
    assert!(until.is_some(), "the extend is noted while the row is held");
    h.clock.advance(chrono::Duration::seconds(10));
    assert!(h.backend.job_extend_many(&extend(30)).await?.is_empty());
    assert_eq!(
        noted(&sql, db.schema(), lease.job_id).await?,
        until,
        "the heartbeat kept the longer note"
    );
    hold.release().await?;
    // Past the claim's lease and the heartbeat's, within the extend: not taken back.
    h.clock.advance(chrono::Duration::seconds(120));
    assert_eq!(h.maintenance().job_rescue_expired().await?, 0);
    Ok(())
}

/// The conformance suite holds a silent node's job (`a_dead_nodes_held_job_keeps_…`); this
/// is the same for a vanished node, whose release is the same statement, found by its free
/// liveness lock: the held job is skipped and its node kept (and its lock, taken by each
/// check for the length of its release, still free), so the next check releases the job
/// once the row is free, without waiting for its lease.
#[tokio::test]
async fn a_vanished_nodes_job_held_elsewhere_is_released_once_free() -> anyhow::Result<()> {
    let h = postgres().await?;
    let liveness = h
        .backend
        .node_liveness()
        .expect("PostgreSQL tracks liveness");
    let gone = hopper_conformance::node_info("gone");
    let lock = liveness.node_hold(&gone).await?;
    let jobs: Vec<_> = (0..2).map(|_| job("k", "q")).collect();
    h.backend.job_insert_many(&jobs).await?;
    let claimed = h
        .claim_as(gone.id, "q", 2, Duration::from_secs(600))
        .await?;
    assert_eq!(claimed.len(), 2);
    let db = h.store::<TestDatabase>().expect("a TestDatabase harness");
    let (held, free) = (claimed[0].lease.job_id, claimed[1].lease.job_id);
    let hold = db.hold_job(held).await?;

    // The lock session ends a moment after its connection closes.
    drop(lock);
    let mut released = 0;
    for _ in 0..500 {
        released = liveness.node_release_vanished().await?;
        if released > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(released, 1, "the job that is free");
    assert_eq!(h.get(free).await?.state, JobState::Available);
    assert_eq!(h.get(held).await?.state, JobState::Running);
    assert_eq!(liveness.node_release_vanished().await?, 0, "still held");

    // No time passes: the lease is ten minutes away.
    hold.release().await?;
    assert_eq!(liveness.node_release_vanished().await?, 1);
    let got = h.get(held).await?;
    assert_eq!(got.state, JobState::Available);
    assert!(got.errors[0].error.contains("vanished"), "{:?}", got.errors);
    assert_eq!(liveness.node_release_vanished().await?, 0, "forgotten");
    Ok(())
}

#[tokio::test]
async fn an_outcome_whose_row_is_held_does_not_stop_its_batch() -> anyhow::Result<()> {
    let h = postgres().await?;
    let db = h.store::<TestDatabase>().expect("a TestDatabase harness");
    outcomes_around_held_rows(&h, db).await
}

/// Four outcomes, one of each statement's kinds and two of them (a completion, a failure)
/// for jobs whose rows another transaction holds: the batch comes back at once, the held
/// two answered held and left running, the others written; once the rows are free the
/// held ones are written. Shared with the PgBouncer harness, where the three statements
/// share one transaction.
pub(crate) async fn outcomes_around_held_rows(
    h: &Harness,
    db: &TestDatabase,
) -> anyhow::Result<()> {
    let jobs: Vec<_> = (0..4).map(|_| job("k", "held")).collect();
    h.backend.job_insert_many(&jobs).await?;
    let leases: Vec<_> = h.claim("held", 4).await?.iter().map(|j| j.lease).collect();
    assert_eq!(leases.len(), 4);
    let outcomes = [
        completed(),
        completed(),
        retry("later", Duration::from_secs(60)),
        Outcome::Snoozed {
            retry_in: Duration::from_secs(60),
        },
    ];
    let finishes: Vec<Finish> = leases
        .iter()
        .zip(outcomes)
        .map(|(&lease, outcome)| Finish { lease, outcome })
        .collect();
    let held = [leases[0].job_id, leases[2].job_id];
    let holder = crate::support::connect(db.url()).await?;
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM {}.jobs WHERE id IN ('{}', '{}') FOR UPDATE",
            db.schema(),
            held[0],
            held[1]
        ))
        .await?;
    let results =
        tokio::time::timeout(Duration::from_secs(5), h.backend.job_finish_many(&finishes))
            .await
            .map_err(|_| anyhow::anyhow!("the outcomes waited on the held rows"))??;
    assert_eq!(
        results,
        [
            FinishResult::Held,
            FinishResult::Recorded(JobState::Completed),
            FinishResult::Held,
            FinishResult::Recorded(JobState::Scheduled),
        ]
    );
    for id in held {
        assert_eq!(h.get(id).await?.state, JobState::Running, "held: unchanged");
    }

    holder.batch_execute("COMMIT").await?;
    let again = [finishes[0].clone(), finishes[2].clone()];
    assert_eq!(
        h.backend.job_finish_many(&again).await?,
        [
            FinishResult::Recorded(JobState::Completed),
            FinishResult::Recorded(JobState::Scheduled),
        ]
    );
    Ok(())
}

/// A runtime whose job's row another transaction holds when its outcome is written: the
/// jobs after it complete meanwhile (the completer does not wait on the row), and the held
/// one once the row is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_jobs_outcome_waits_alone_in_the_runtime() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = Client::new(db.backend());
    let gated = insert_gated(&db, "held").await?;
    let (mut workers, reached, go) = gated_workers();
    workers.register(FnWorker::new(|_, _: Quick| async { Ok(()) }));
    let handle = Runtime::new(db.backend(), workers, config("held", 4))
        .start()
        .await?;
    reached.notified().await;
    let hold = db.hold_job(gated).await?;
    // The gated job ends and its outcome meets the held row; the next ones must not wait.
    go.notify_one();
    let quick: Vec<NewJob> = (1..=5)
        .map(|n| NewJob::of(&Quick { n }).map(|j| j.with_queue("held")))
        .collect::<Result<_, _>>()?;
    client.insert_many(&quick).await?;
    wait_for(&db, "held", Duration::from_secs(10), |s| s.completed == 5)
        .await
        .map_err(|e| anyhow::anyhow!("the other outcomes waited on the held row: {e}"))?;
    let record = db
        .backend()
        .job_get(&hopper_core::backend::JobGetParams { id: gated })
        .await?;
    assert_eq!(
        record.map(|r| r.state),
        Some(JobState::Running),
        "held: not written yet"
    );

    hold.release().await?;
    wait_for(&db, "held", Duration::from_secs(10), |s| s.completed == 6).await?;
    handle.shutdown().await;
    Ok(())
}

/// The latest renewal noted for job `id` while its row was held, if any.
async fn noted(
    sql: &tokio_postgres::Client,
    schema: &str,
    id: hopper::JobId,
) -> anyhow::Result<Option<chrono::DateTime<chrono::Utc>>> {
    let row = sql
        .query_opt(
            &format!("SELECT expires_at FROM {schema}.held_leases WHERE job_id = $1"),
            &[&id],
        )
        .await?;
    Ok(row.map(|r| r.get(0)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_outcome_that_outlasts_its_lease_is_not_run_again() -> anyhow::Result<()> {
    let h = postgres().await?;
    let db = h.store::<TestDatabase>().expect("a TestDatabase harness");
    let gated = insert_gated(db, "held").await?;
    let (workers, reached, go) = gated_workers();
    let lease = Duration::from_secs(30);
    let handle = Runtime::new(db.backend(), workers, config("held", 1).with_lease(lease))
        .start()
        .await?;
    reached.notified().await;
    let hold = db.hold_job(gated).await?;
    go.notify_one();
    // The row's lease runs out while it is held and the outcome waits: the completer's
    // renewals at each try are noted beside the row.
    h.clock.advance(chrono::Duration::seconds(40));
    let now = hopper_conformance::t0() + chrono::Duration::seconds(40);
    let renewed_after = now + chrono::Duration::seconds(29);
    let sql = crate::support::connect(db.url()).await?;
    let what = "the held outcome's lease was not renewed";
    eventually(Duration::from_secs(15), what, || async {
        Ok(noted(&sql, db.schema(), gated).await? >= Some(renewed_after))
    })
    .await?;
    assert!(expiry(&sql, db.schema(), gated).await? < now);

    hold.release().await?;
    assert_eq!(
        h.maintenance().job_rescue_expired().await?,
        0,
        "the job whose outcome waited on the held row was taken back"
    );
    wait_for(db, "held", Duration::from_secs(10), |s| s.completed == 1).await?;
    let record = db
        .backend()
        .job_get(&hopper_core::backend::JobGetParams { id: gated })
        .await?
        .expect("the job");
    assert_eq!((record.attempt, record.errors.len()), (1, 0), "run once");
    handle.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_held_periodic_entry_does_not_stop_the_others() -> anyhow::Result<()> {
    let h = postgres().await?;
    let store = h.scheduling().expect("PostgreSQL schedules");
    let tick = hopper_conformance::t0() + hopper_conformance::secs(60);
    let entry = |name: &str| CronEntry {
        name: name.into(),
        schedule: "* * * * *".into(),
        timezone: "UTC".into(),
        queue: "cron".into(),
        kind: "tick".into(),
        args: serde_json::json!({}),
        priority: Priority::NORMAL,
        max_attempts: 3,
        timeout_ms: 60_000,
        catch_up: false,
        next_run_at: tick,
        last_run_at: None,
        last_job_id: None,
    };
    store.cron_register(&[entry("held"), entry("free")]).await?;
    let advance = |name: &str| CronAdvance {
        name: name.into(),
        expected_next_run_at: tick,
        next_run_at: tick + hopper_conformance::secs(60),
        jobs: vec![(
            tick,
            NewJob::new("tick", serde_json::json!({})).with_queue("cron"),
        )],
    };
    let db = h.store::<TestDatabase>().expect("a TestDatabase harness");
    let holder = crate::support::connect(db.url()).await?;
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM {}.cron_jobs WHERE name = 'held' FOR UPDATE",
            db.schema()
        ))
        .await?;
    let moved = tokio::time::timeout(Duration::from_secs(5), store.cron_advance(&advance("held")))
        .await
        .map_err(|_| anyhow::anyhow!("the advance waited on the held row"))??;
    assert!(!moved, "held: not advanced now");
    assert!(store.cron_advance(&advance("free")).await?);

    holder.batch_execute("COMMIT").await?;
    assert!(
        store.cron_advance(&advance("held")).await?,
        "advanced once free"
    );
    assert!(
        !store.cron_advance(&advance("held")).await?,
        "and once only"
    );
    let listed = h.backend.cron_list().await?;
    assert!(
        listed
            .iter()
            .all(|e| e.next_run_at == tick + hopper_conformance::secs(60))
    );
    Ok(())
}

/// A pool given a lock bound of its own (`PgOptions::lock_timeout`, as `hopper serve`'s
/// HTTP connections have) keeps it after a batch of outcomes, whose statements bound their
/// waits to 100 ms around themselves: the setting is put back, not reset to the server's.
#[tokio::test]
async fn a_pools_lock_bound_outlasts_the_outcome_statements() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let options = hopper::PgOptions::default()
        .with_schema(db.schema())
        .with_pool_size(1)
        .with_lock_timeout(Duration::from_millis(300));
    let backend = hopper::PgBackend::connect(db.url(), options).await?;
    let shown = || async {
        let conn = backend.pool().get().await?;
        let row = conn.query_one("SHOW lock_timeout", &[]).await?;
        anyhow::Ok(row.try_get::<_, String>(0)?)
    };
    assert_eq!(shown().await?, "300ms", "set as the connection opens");
    backend.job_insert(&job("k", "bound")).await?;
    let claimed = backend
        .job_claim(&hopper_core::ClaimParams {
            queue: "bound".into(),
            node: uuid::Uuid::now_v7(),
            limit: 1,
            lease: Duration::from_secs(60),
            kinds: None,
        })
        .await?;
    let finish = Finish {
        lease: claimed[0].lease,
        outcome: completed(),
    };
    assert_eq!(
        backend.job_finish_many(&[finish]).await?,
        [FinishResult::Recorded(JobState::Completed)]
    );
    assert_eq!(shown().await?, "300ms", "put back after the outcomes");
    Ok(())
}

#[tokio::test]
async fn a_shared_log_store_does_not_wait_on_a_held_log_row() -> anyhow::Result<()> {
    let h = postgres().await?;
    let db = h.store::<TestDatabase>().expect("a TestDatabase harness");
    log_stores_around_held_rows(&h, db).await
}

/// Three attempts with a line stored each; then another transaction holds the log row of
/// the first (`SELECT … FOR UPDATE`) and deletes the second's (uncommitted). A shared
/// writer's store of a line for each comes back at once: the two held ones answered held,
/// nothing of theirs changed, the third stored; once the rows are free the held ones are
/// stored after their first lines. Shared with the PgBouncer harness, where the bound is
/// sent around the store in a transaction of its own.
pub(crate) async fn log_stores_around_held_rows(
    h: &Harness,
    db: &TestDatabase,
) -> anyhow::Result<()> {
    use hopper_core::job_log::{JobLogAppend, LogLevel, LogLine};
    let jobs: Vec<_> = (0..3).map(|_| job("k", "logged")).collect();
    h.backend.job_insert_many(&jobs).await?;
    let leases: Vec<_> = h
        .claim("logged", 3)
        .await?
        .iter()
        .map(|j| j.lease)
        .collect();
    assert_eq!(leases.len(), 3);
    let store = h.backend.logs().expect("PostgreSQL keeps logs");
    let appends = |message: &str, leases: &[hopper_core::Lease]| -> Vec<JobLogAppend> {
        leases
            .iter()
            .map(|&lease| JobLogAppend {
                lease,
                lines: vec![LogLine {
                    at: chrono::Utc::now(),
                    level: LogLevel::Info,
                    message: message.to_owned(),
                    fields: serde_json::Map::new(),
                }],
                dropped: 0,
            })
            .collect()
    };
    assert!(
        store
            .job_log_append(&appends("first", &leases))
            .await?
            .is_empty()
    );

    let holder = crate::support::connect(db.url()).await?;
    let s = db.schema();
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM {s}.job_logs WHERE job_id = '{}' FOR UPDATE; \
             DELETE FROM {s}.job_logs WHERE job_id = '{}'",
            leases[0].job_id, leases[1].job_id
        ))
        .await?;
    let held = tokio::time::timeout(
        Duration::from_secs(5),
        store.job_log_append_shared(&appends("second", &leases)),
    )
    .await
    .map_err(|_| anyhow::anyhow!("the store waited on the held log rows"))??;
    assert_eq!(sorted(held), sorted(leases[..2].to_vec()));
    let messages = |logs: Vec<hopper_core::job_log::AttemptLog>| -> Vec<String> {
        logs.into_iter()
            .flat_map(|log| log.lines.into_iter().map(|line| line.message))
            .collect()
    };
    assert_eq!(
        messages(store.job_logs(leases[2].job_id).await?),
        ["first", "second"]
    );

    holder.batch_execute("ROLLBACK").await?;
    let again = store
        .job_log_append_shared(&appends("second", &leases[..2]))
        .await?;
    assert!(again.is_empty(), "stored once free: {again:?}");
    for lease in &leases {
        assert_eq!(
            messages(store.job_logs(lease.job_id).await?),
            ["first", "second"],
            "{lease:?}"
        );
    }
    Ok(())
}

fn sorted(mut leases: Vec<hopper_core::Lease>) -> Vec<hopper_core::Lease> {
    leases.sort_by_key(|l| l.job_id);
    leases
}

/// A runtime's log store waits on its own held log row (only that attempt's store waits),
/// and the runtime gives it up at its bound: the connection it waited on does not go back
/// to the pool, where the next statement would queue behind the wait. A pool of one, so
/// the next statement needs a connection anew.
#[tokio::test]
async fn a_log_store_given_up_while_it_waits_does_not_keep_its_connection() -> anyhow::Result<()> {
    use hopper_core::job_log::{JobLogAppend, LogLevel, LogLine};
    let db = TestDatabase::new().await?;
    let options = hopper::PgOptions::default()
        .with_schema(db.schema())
        .with_pool_size(1);
    let backend = hopper::PgBackend::connect(db.url(), options).await?;
    backend.job_insert_many(&[job("k", "logged")]).await?;
    let claimed = backend
        .job_claim(&hopper_core::backend::ClaimParams {
            queue: "logged".into(),
            node: uuid::Uuid::now_v7(),
            limit: 1,
            lease: Duration::from_secs(600),
            kinds: None,
        })
        .await?;
    let lease = claimed[0].lease;
    let append = [JobLogAppend {
        lease,
        lines: vec![LogLine {
            at: chrono::Utc::now(),
            level: LogLevel::Info,
            message: "line".into(),
            fields: serde_json::Map::new(),
        }],
        dropped: 0,
    }];
    let store = backend.logs().expect("PostgreSQL keeps logs");
    store.job_log_append(&append).await?;
    let holder = crate::support::connect(db.url()).await?;
    holder
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM {}.job_logs WHERE job_id = '{}' FOR UPDATE",
            db.schema(),
            lease.job_id
        ))
        .await?;
    let waited = tokio::time::timeout(Duration::from_millis(300), store.job_log_append(&append));
    assert!(waited.await.is_err(), "the store waits on its own held row");
    let next = tokio::time::timeout(
        Duration::from_secs(5),
        backend.job_get(&hopper_core::backend::JobGetParams { id: lease.job_id }),
    )
    .await
    .map_err(|_| anyhow::anyhow!("the next statement queued behind the abandoned store"))??;
    assert_eq!(next.map(|j| j.state), Some(JobState::Running));
    holder.batch_execute("COMMIT").await?;
    Ok(())
}
