//! The session rules of `docs/protocol.md` against the real server and database: one bound
//! for every duration a peer gives, one outcome per lease, UUIDv7 job ids, the roles of
//! tokens, the bound on served queues and an idle cost that does not grow with them, and a
//! worker that said `bye` leaving without a penalty.

use std::time::Duration;

use crate::common::*;
use ciborium::Value;
use hopper::backend::{Backend, JobGetParams};
use hopper::testing::TestDatabase;
use hopper::{JobState, NewJob};
use hopper_server::{Access, Auth, Credential};
use uuid::Uuid;

use hopper_core::limits::MAX_DURATION_MS;

/// An unsigned CBOR integer.
fn uint(n: u64) -> Value {
    Value::Integer(n.into())
}

/// A worker of `kind` with room for `concurrency` orders.
async fn worker(endpoint: &str, kind: &str, concurrency: i64) -> RawPeer {
    let mut peer = RawPeer::connect(endpoint).await;
    let extra = vec![
        ("kinds", Value::Array(vec![text(kind)])),
        ("concurrency", int(concurrency)),
    ];
    let r = peer.hello("worker", TOKEN, extra).await;
    assert_eq!(text_of(&r, "type"), "welcome", "{r:?}");
    peer
}

/// A request about one lease.
fn on_lease(ty: &str, req: i64, id: &str, attempt: i64, extra: Vec<(&str, Value)>) -> Value {
    let mut entries = vec![
        ("type", text(ty)),
        ("req", int(req)),
        ("id", text(id)),
        ("attempt", int(attempt)),
    ];
    entries.extend(extra);
    map(entries)
}

/// One item of an `outcomes` message.
fn item(outcome: &str, id: &str, attempt: i64, extra: Vec<(&str, Value)>) -> Value {
    let mut entries = vec![
        ("outcome", text(outcome)),
        ("id", text(id)),
        ("attempt", int(attempt)),
    ];
    entries.extend(extra);
    map(entries)
}

/// The `results` of an `acks`, as text.
fn results(acks: &Value) -> Vec<String> {
    field(acks, "results")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_text)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

async fn state(backend: &dyn Backend, id: &str) -> anyhow::Result<hopper::JobRecord> {
    let id: Uuid = id.parse()?;
    backend
        .job_get(&JobGetParams { id })
        .await?
        .ok_or_else(|| anyhow::anyhow!("job {id} is gone"))
}

#[tokio::test]
async fn durations_past_the_bound_are_refused_and_the_writer_goes_on() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let mut w = worker(server.endpoint(), "slow", 1).await;
    db.backend()
        .job_insert(&NewJob::new("slow", serde_json::json!({})))
        .await?;
    let (id, attempt) = order(&mut w).await;
    let huge = [MAX_DURATION_MS + 1, i64::MAX as u64, u64::MAX];
    for (n, ms) in huge.into_iter().enumerate() {
        let req = 10 + 10 * n as i64;
        let tries = [
            on_lease(
                "failed",
                req,
                &id,
                attempt,
                vec![("error", text("boom")), ("retry_in_ms", uint(ms))],
            ),
            on_lease(
                "snoozed",
                req + 1,
                &id,
                attempt,
                vec![("delay_ms", uint(ms))],
            ),
            on_lease("extend", req + 2, &id, attempt, vec![("by_ms", uint(ms))]),
            map(vec![
                ("type", text("outcomes")),
                ("req", int(req + 3)),
                (
                    "outcomes",
                    Value::Array(vec![item(
                        "snoozed",
                        &id,
                        attempt,
                        vec![("delay_ms", uint(ms))],
                    )]),
                ),
            ]),
            map(vec![
                ("type", text("submit")),
                ("req", int(req + 4)),
                (
                    "job",
                    map(vec![("kind", text("later")), ("delay_ms", uint(ms))]),
                ),
            ]),
        ];
        for message in tries {
            w.send(&message).await;
            let r = w.recv_type("error").await;
            assert_eq!(text_of(&r, "code"), "invalid", "{message:?} -> {r:?}");
            assert!(text_of(&r, "message").contains("too long"), "{r:?}");
        }
    }
    // Nothing was written: the job still runs under its lease, and the writer is free.
    let job = state(&*db.backend(), &id).await?;
    assert_eq!(job.state, JobState::Running);
    assert_eq!(db.queue_stats("default").await?.scheduled, 0);
    // At the bound itself: accepted.
    let at_bound = on_lease(
        "extend",
        60,
        &id,
        attempt,
        vec![("by_ms", uint(MAX_DURATION_MS))],
    );
    w.send(&at_bound).await;
    let r = w.recv_type("ack").await;
    assert_eq!(text_of(&r, "result"), "recorded", "{r:?}");
    w.send(&on_lease("completed", 61, &id, attempt, vec![]))
        .await;
    let r = w.recv_type("ack").await;
    assert_eq!(text_of(&r, "result"), "recorded", "{r:?}");
    assert_eq!(state(&*db.backend(), &id).await?.state, JobState::Completed);
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn an_error_text_with_nul_is_stored_not_retried_for_ever() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let mut w = worker(server.endpoint(), "nul", 1).await;
    db.backend()
        .job_insert(&NewJob::new("nul", serde_json::json!({})))
        .await?;
    let (id, attempt) = order(&mut w).await;
    let failed = vec![
        ("error", text("before\u{0}after")),
        ("retryable", Value::Bool(false)),
    ];
    w.send(&on_lease("failed", 2, &id, attempt, failed)).await;
    let r = w.recv_type("ack").await;
    assert_eq!(text_of(&r, "result"), "recorded", "{r:?}");
    let job = state(&*db.backend(), &id).await?;
    assert_eq!(job.state, JobState::Failed);
    assert_eq!(job.errors[0].error, "before\u{FFFD}after");
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn submitted_ids_must_be_uuid_v7() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let mut c = RawPeer::connect(server.endpoint()).await;
    assert_eq!(
        text_of(&c.hello("client", TOKEN, vec![]).await, "type"),
        "welcome"
    );
    let submit = |req: i64, id: &str| {
        map(vec![
            ("type", text("submit")),
            ("req", int(req)),
            ("job", map(vec![("kind", text("k")), ("id", text(id))])),
        ])
    };
    c.send(&submit(2, &Uuid::new_v4().to_string())).await;
    let r = c.recv().await;
    assert_eq!(text_of(&r, "code"), "invalid", "{r:?}");
    assert!(text_of(&r, "message").contains("UUIDv7"), "{r:?}");
    // A UUIDv7 dated far ahead would list first for years: refused too.
    c.send(&submit(4, "ffffffff-ffff-7fff-bfff-ffffffffffff"))
        .await;
    let r = c.recv().await;
    assert_eq!(text_of(&r, "code"), "invalid", "{r:?}");
    assert!(
        text_of(&r, "message").contains("ahead of the server's clock"),
        "{r:?}"
    );
    assert_eq!(db.queue_stats("default").await?.available, 0);
    let v7 = Uuid::now_v7().to_string();
    c.send(&submit(3, &v7)).await;
    let r = c.recv().await;
    assert_eq!(text_of(&r, "type"), "submitted", "{r:?}");
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn only_the_first_outcome_of_a_lease_counts() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let mut w = worker(server.endpoint(), "twice", 2).await;
    let backend = db.backend();
    for n in 0..2 {
        backend
            .job_insert(&NewJob::new("twice", serde_json::json!({ "n": n })))
            .await?;
    }
    let (a, attempt_a) = order(&mut w).await;
    let (b, attempt_b) = order(&mut w).await;

    // The same lease twice in one message: the second is `lease_lost`.
    w.send(&map(vec![
        ("type", text("outcomes")),
        ("req", int(5)),
        (
            "outcomes",
            Value::Array(vec![
                item("completed", &a, attempt_a, vec![]),
                item(
                    "failed",
                    &a,
                    attempt_a,
                    vec![("error", text("late")), ("retryable", Value::Bool(false))],
                ),
            ]),
        ),
    ]))
    .await;
    let acks = w.recv_type("acks").await;
    assert_eq!(results(&acks), ["recorded", "lease_lost"], "{acks:?}");

    // Contradicting outcomes pipelined (the second sent before the first is acknowledged).
    w.send(&on_lease("completed", 6, &b, attempt_b, vec![]))
        .await;
    let failed = vec![("error", text("no")), ("retryable", Value::Bool(false))];
    w.send(&on_lease("failed", 7, &b, attempt_b, failed)).await;
    let mut acks = Vec::new();
    for _ in 0..2 {
        let r = w.recv_type("ack").await;
        let req = field(&r, "req").and_then(Value::as_integer).map(i128::from);
        acks.push((req, text_of(&r, "result").to_owned()));
    }
    acks.sort();
    assert_eq!(
        acks,
        [
            (Some(6), "recorded".to_owned()),
            (Some(7), "lease_lost".to_owned())
        ]
    );
    for id in [&a, &b] {
        let job = state(&*backend, id).await?;
        assert_eq!(job.state, JobState::Completed, "{id}");
        assert!(job.errors.is_empty(), "{id}: {:?}", job.errors);
    }
    // A repeat after the write: the database says the lease is gone.
    w.send(&on_lease("completed", 8, &a, attempt_a, vec![]))
        .await;
    assert_eq!(text_of(&w.recv_type("ack").await, "result"), "lease_lost");
    server.shutdown().await;
    Ok(())
}

/// A worker's requests for another attempt of an order it holds (a late outcome of an
/// earlier attempt, a wrong or forged one) are `lease_lost` and leave the order it holds
/// alone: still its own, its credit still taken, reported as usual. Letting go of it would
/// send the worker more than its concurrency and leave the order unretried when the worker
/// vanishes; an `extend` of another attempt must not move the order's timeout either.
#[tokio::test]
async fn another_attempt_of_an_order_leaves_the_order_held() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let mut w = worker(server.endpoint(), "one", 1).await;
    let backend = db.backend();
    backend
        .job_insert(&NewJob::new("one", serde_json::json!({})))
        .await?;
    let (id, attempt) = order(&mut w).await;
    let other = attempt + 1;

    w.send(&on_lease("completed", 3, &id, other, vec![])).await;
    assert_eq!(text_of(&w.recv_type("ack").await, "result"), "lease_lost");
    let released = vec![item("released", &id, other, vec![])];
    w.send(&map(vec![
        ("type", text("outcomes")),
        ("req", int(4)),
        ("outcomes", Value::Array(released)),
    ]))
    .await;
    assert_eq!(results(&w.recv_type("acks").await), ["lease_lost"]);
    let lease = map(vec![("id", text(&id)), ("attempt", int(other))]);
    w.send(&map(vec![
        ("type", text("heartbeat")),
        ("req", int(5)),
        ("leases", Value::Array(vec![lease])),
    ]))
    .await;
    let ack = w.recv_type("heartbeat_ack").await;
    assert_eq!(
        field(&ack, "lost").and_then(Value::as_array).map(Vec::len),
        Some(1),
        "{ack:?}"
    );

    // Its one slot is still taken: a second job is not sent to it...
    backend
        .job_insert(&NewJob::new("one", serde_json::json!({})))
        .await?;
    w.set_timeout(Duration::from_millis(1500));
    let extra = w.try_recv_bytes().await;
    assert!(
        extra.is_none(),
        "an order past the worker's concurrency: {:?}",
        extra.map(|f| ciborium::from_reader::<Value, _>(&f[..]))
    );
    // ... until the order it holds is reported, with its own attempt.
    w.set_timeout(Duration::from_secs(10));
    w.send(&on_lease("completed", 6, &id, attempt, vec![]))
        .await;
    // The freed slot may bring the next order before the outcome's ack: take both, in
    // either order.
    let (mut acked, mut next) = (None, None);
    while acked.is_none() || next.is_none() {
        let v = w.recv().await;
        match field(&v, "type").and_then(Value::as_text) {
            Some("ack") => acked = Some(text_of(&v, "result").to_owned()),
            Some("order") => {
                let job = field(&v, "job").cloned().unwrap_or(Value::Null);
                next = Some(text_of(&job, "id").to_owned());
            }
            _ => {}
        }
    }
    assert_eq!(acked.as_deref(), Some("recorded"));
    assert_ne!(next.as_deref(), Some(id.as_str()));
    assert_eq!(state(&*backend, &id).await?.state, JobState::Completed);
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn each_token_does_what_its_role_allows() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let mut config = config(&db, Duration::from_secs(5)).await;
    let (client, worker_token, admin) = ("c".repeat(20), "w".repeat(20), "a".repeat(20));
    config.auth = Auth::Credentials(vec![
        Credential {
            token: client.clone(),
            access: Access::Client,
        },
        Credential {
            token: worker_token.clone(),
            access: Access::Worker,
        },
        Credential {
            token: admin.clone(),
            access: Access::Admin,
        },
    ]);
    let server = start(config).await;
    let submit = map(vec![
        ("type", text("submit")),
        ("req", int(2)),
        ("job", map(vec![("kind", text("k"))])),
    ]);
    let list = map(vec![("type", text("list_jobs")), ("req", int(3))]);
    let stats = map(vec![("type", text("queue_stats")), ("req", int(4))]);

    // A client token: submit and read, but neither run jobs nor administer.
    let mut c = RawPeer::connect(server.endpoint()).await;
    let r = c.hello("worker", &client, vec![]).await;
    assert_eq!(text_of(&r, "code"), "unauthorized", "{r:?}");
    assert_eq!(
        text_of(&c.hello("client", &client, vec![]).await, "type"),
        "welcome"
    );
    c.send(&submit).await;
    let r = c.recv().await;
    assert_eq!(text_of(&r, "type"), "submitted", "{r:?}");
    let id = field(&r, "ids")
        .and_then(Value::as_array)
        .and_then(|ids| ids.first())
        .and_then(Value::as_text)
        .unwrap_or_default()
        .to_owned();
    c.send(&map(vec![
        ("type", text("status")),
        ("req", int(5)),
        ("id", text(&id)),
    ]))
    .await;
    assert_eq!(text_of(&c.recv().await, "type"), "job");
    let leases = map(vec![
        ("type", text("heartbeat")),
        ("req", int(7)),
        (
            "leases",
            Value::Array(vec![map(vec![("id", text(&id)), ("attempt", int(1))])]),
        ),
    ]);
    let refused_all = [
        (&list, "an admin"),
        (&stats, "an admin"),
        (&on_lease("completed", 6, &id, 1, vec![]), "a worker"),
        (&leases, "a worker"),
    ];
    for (refused, needed) in refused_all {
        c.send(refused).await;
        let r = c.recv().await;
        assert_eq!(text_of(&r, "code"), "unauthorized", "{refused:?} -> {r:?}");
        assert_eq!(
            text_of(&r, "message"),
            format!("this token's role is client; this request needs {needed} token")
        );
    }

    // A worker token: a worker (that may also submit), not an admin.
    let mut w = RawPeer::connect(server.endpoint()).await;
    let r = w.hello(
        "worker",
        &worker_token,
        vec![("kinds", Value::Array(vec![text("other")]))],
    );
    assert_eq!(text_of(&r.await, "type"), "welcome");
    w.send(&submit).await;
    assert_eq!(text_of(&w.recv().await, "type"), "submitted");
    w.send(&list).await;
    let r = w.recv().await;
    assert_eq!(text_of(&r, "code"), "unauthorized", "{r:?}");
    assert_eq!(
        text_of(&r, "message"),
        "this token's role is worker; this request needs an admin token"
    );
    // A refused hello keeps the session it had.
    let r = w.hello("worker", "not-a-token-at-all", vec![]).await;
    assert_eq!(text_of(&r, "code"), "unauthorized");
    w.send(&submit).await;
    assert_eq!(text_of(&w.recv().await, "type"), "submitted");

    // An admin token: everything.
    let mut a = RawPeer::connect(server.endpoint()).await;
    assert_eq!(
        text_of(&a.hello("client", &admin, vec![]).await, "type"),
        "welcome"
    );
    a.send(&list).await;
    let r = a.recv().await;
    assert_eq!(text_of(&r, "type"), "jobs", "{r:?}");
    a.send(&stats).await;
    assert_eq!(text_of(&a.recv().await, "type"), "stats");
    server.shutdown().await;
    Ok(())
}

/// Scans of the schema's jobs table so far (each claim is one).
async fn table_scans(db: &TestDatabase) -> anyhow::Result<i64> {
    let (client, conn) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    let row = client
        .query_one(
            "SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) FROM pg_stat_user_tables \
             WHERE schemaname = $1 AND relname = 'jobs'",
            &[&db.schema()],
        )
        .await?;
    Ok(row.get(0))
}

#[tokio::test]
async fn served_queues_are_bounded_and_cost_nothing_while_idle() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let queues = |n: usize| Value::Array((0..n).map(|i| text(&format!("q{i}"))).collect());
    let mut greedy = RawPeer::connect(server.endpoint()).await;
    let r = greedy
        .hello("worker", TOKEN, vec![("queues", queues(101))])
        .await;
    assert_eq!(text_of(&r, "code"), "invalid", "{r:?}");
    assert!(text_of(&r, "message").contains("at most 100"), "{r:?}");
    let mut w = RawPeer::connect(server.endpoint()).await;
    let r = w.hello(
        "worker",
        TOKEN,
        vec![("queues", queues(100)), ("concurrency", int(4))],
    );
    assert_eq!(text_of(&r.await, "type"), "welcome");

    // Idle: the server must not claim from each of the 100 queues every poll (1 s), which
    // is 600 claims in the window. Its maintenance (promoter, rescuer, vacuum check) and one
    // claim per poll measured 42 scans.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = table_scans(&db).await?;
    let window = Duration::from_secs(6);
    tokio::time::sleep(window).await;
    // Statistics reach the view when each backend goes idle (at most a second later).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let scans = table_scans(&db).await? - before;
    println!("idle with 100 queues: {scans} scans of the jobs table in {window:?}");
    assert!(
        scans < 150,
        "{scans} scans of the jobs table in {window:?} while idle with 100 queues"
    );

    // Jobs are still found at once: a notification wakes the queue.
    let heartbeat = map(vec![("type", text("heartbeat")), ("req", int(9))]);
    w.send(&heartbeat).await;
    w.recv_type("heartbeat_ack").await;
    db.backend()
        .job_insert(&NewJob::new("k", serde_json::json!({})).with_queue("q77"))
        .await?;
    let (id, _) = order(&mut w).await;
    assert!(!id.is_empty());
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_worker_that_said_bye_leaves_its_orders_uncounted() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_millis(300)).await).await;
    let mut w = worker(server.endpoint(), "left", 1).await;
    db.backend()
        .job_insert(&NewJob::new("left", serde_json::json!({})))
        .await?;
    let (id, _) = order(&mut w).await;
    w.send(&map(vec![("type", text("bye")), ("req", int(4))]))
        .await;
    assert_eq!(text_of(&w.recv_type("ack").await, "result"), "recorded");
    // It leaves without releasing its order: the server does so once it is gone.
    drop(w);
    let stats = db
        .wait_for("default", Duration::from_secs(10), |s| s.available == 1)
        .await
        .map_err(anyhow::Error::msg)?;
    assert_eq!(stats.running, 0);
    let job = state(&*db.backend(), &id).await?;
    assert_eq!(job.attempt - job.uncounted, 0, "the attempt is not counted");
    assert!(job.errors.is_empty(), "{:?}", job.errors);
    server.shutdown().await;
    Ok(())
}

/// The median of some durations.
fn median(mut all: Vec<Duration>) -> Duration {
    all.sort();
    all[all.len() / 2]
}

#[tokio::test]
async fn a_vanished_workers_job_runs_elsewhere_soon_after_it_is_dropped() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let heartbeat = Duration::from_millis(200);
    let server = start(config(&db, heartbeat).await).await;
    let mut spare = worker(server.endpoint(), "orphan", 1).await;
    let beat = map(vec![("type", text("heartbeat")), ("req", int(2))]);
    let mut after_drop = Vec::new();
    for round in 0..10 {
        // A worker with room takes the job, then vanishes without a word.
        let mut gone = worker(server.endpoint(), "orphan", 100).await;
        db.backend()
            .job_insert(&NewJob::new(
                "orphan",
                serde_json::json!({ "round": round }),
            ))
            .await?;
        // The spare heartbeats while `gone` waits for its order: silent for three periods
        // (600 ms, which a claim on a loaded machine can take) it would be dropped, and
        // the job would have nowhere to go. Its answers are read in the loop below.
        let (id, _) = tokio::select! {
            got = order(&mut gone) => got,
            never = keep_alive(&mut spare, &beat) => match never {},
        };
        spare.set_timeout(Duration::from_millis(5));
        while let Some(frame) = spare.try_recv_bytes().await {
            let answer: Value = ciborium::from_reader(&frame[..]).expect("CBOR");
            assert_ne!(
                text_of(&answer, "type"),
                "error",
                "the spare's session ended"
            );
        }
        spare.set_timeout(Duration::from_secs(10));
        let vanished = tokio::time::Instant::now();
        drop(gone);
        // The spare keeps its session (heartbeats) until the job comes to it.
        let deadline = vanished + Duration::from_secs(30);
        let (again, attempt) = loop {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the orphaned job reached the spare within 30 s"
            );
            spare.send(&beat).await;
            let r = spare.recv().await;
            assert_ne!(
                text_of(&r, "type"),
                "error",
                "the spare's session ended: {r:?}"
            );
            if text_of(&r, "type") == "order" {
                let job = field(&r, "job").cloned().unwrap_or(Value::Null);
                let attempt = field(&job, "attempt")
                    .and_then(Value::as_integer)
                    .and_then(|i| i64::try_from(i).ok())
                    .unwrap_or(-1);
                break (text_of(&job, "id").to_owned(), attempt);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(again, id);
        let waited = vanished.elapsed();
        // Dropped once silent for three periods (within 3.2): what follows is the release.
        after_drop.push(waited.saturating_sub(heartbeat * 3));
        spare
            .send(&on_lease("completed", 3, &again, attempt, vec![]))
            .await;
        spare.recv_type("ack").await;
        let job = state(&*db.backend(), &id).await?;
        assert_eq!(job.attempt - job.uncounted, 2, "the vanished run counts");
    }
    let median = median(after_drop.clone());
    println!("re-dispatched after the drop: median {median:?}, all {after_drop:?}");
    assert!(
        median < Duration::from_secs(2),
        "median {median:?} from the drop to the next worker (all: {after_drop:?})"
    );
    server.shutdown().await;
    Ok(())
}

/// Heartbeats `peer` every 50 ms for as long as it is polled, leaving the answers unread.
async fn keep_alive(peer: &mut RawPeer, beat: &Value) -> std::convert::Infallible {
    loop {
        peer.send(beat).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn after_a_restart_unclaimed_orders_go_back_uncounted_before_their_lease_ends()
-> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    // Half the lease (2 s) is far shorter than five heartbeat periods (10 s), so the bound
    // below tells the two apart with seconds to spare on a loaded machine.
    let mut first = config(&db, Duration::from_secs(2)).await;
    first.lease = Duration::from_secs(4);
    let node = first.node_id;
    let server = start(first).await;
    let mut w = worker(server.endpoint(), "stranded", 1).await;
    db.backend()
        .job_insert(&NewJob::new("stranded", serde_json::json!({})))
        .await?;
    let (id, _) = order(&mut w).await;
    // The server dies; its worker never comes back.
    server.abort();
    drop(w);
    let mut again = config(&db, Duration::from_secs(2)).await;
    again.lease = Duration::from_secs(4);
    again.node_id = node;
    let restarted = tokio::time::Instant::now();
    let server = start(again).await;
    // Released at half the lease (2 s), not after five periods (10 s, past the lease).
    db.wait_for("default", Duration::from_secs(15), |s| s.available == 1)
        .await
        .map_err(anyhow::Error::msg)?;
    let took = restarted.elapsed();
    let job = state(&*db.backend(), &id).await?;
    assert_eq!(job.attempt - job.uncounted, 0, "released, not counted");
    assert!(job.errors.is_empty(), "{:?}", job.errors);
    assert!(
        took < Duration::from_secs(6),
        "released {took:?} after the restart"
    );
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn jobs_no_connected_worker_runs_stay_untouched_and_show_their_age() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let orphan = NewJob::new("nobody-runs-this", serde_json::json!({}));
    let orphan_id = orphan.id;
    db.backend().job_insert(&orphan).await?;
    let before = db
        .backend()
        .job_get(&JobGetParams { id: orphan_id })
        .await?
        .map(|j| j.run_at);
    let mut w = worker(server.endpoint(), "served", 2).await;
    // Polls and wake-ups come and go; the orphan is never claimed and put back.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let job = state(&*db.backend(), &orphan_id.to_string()).await?;
    assert_eq!(job.state, JobState::Available);
    assert_eq!(job.attempt, 0, "claimed {} times", job.attempt);
    assert_eq!(Some(job.run_at), before, "its run_at moved");
    let stats = db.queue_stats("default").await?;
    assert!(
        stats.oldest_available_secs >= 2.0,
        "the queue's age tells the truth: {stats:?}"
    );
    // A job of the worker's kind, behind the orphan in the queue, still comes at once.
    db.backend()
        .job_insert(&NewJob::new("served", serde_json::json!({})))
        .await?;
    let (id, _) = order(&mut w).await;
    assert_ne!(id, orphan_id.to_string());
    server.shutdown().await;
    Ok(())
}
