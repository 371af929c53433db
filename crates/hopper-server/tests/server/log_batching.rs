//! `log` requests are stored in batches: what waits while a store runs goes in the next
//! one, a single statement. Many concurrent requests for several attempts are all stored,
//! each attempt's lines in the order sent, by fewer statements than requests; and when the
//! store fails, every request of the batch gets the error, which says whether it is
//! transient (the workers send those again).
//!
//! The statements are counted, and failed as the test says, by
//! [`TestDatabase::fail_log_stores`]. While the
//! test holds a lock on the table, the first store waits and every other request queues
//! behind it; a heartbeat answered after each peer's requests says they all reached the
//! server.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::*;
use ciborium::Value;
use hopper::JobId;
use hopper::testing::TestDatabase;
use hopper_server::ServerHandle;

/// Peers sending logs at once.
const PEERS: usize = 4;
/// Attempts each peer writes to (its requests alternate between them).
const ATTEMPTS_PER_PEER: usize = 2;
/// `log` requests each peer sends.
const REQUESTS_PER_PEER: usize = 50;

/// Which log stores the database refuses.
#[derive(Clone, Copy)]
enum Refuse {
    None,
    /// Every statement, with this SQLSTATE.
    All(&'static str),
    /// Each statement that stores lines of the job of this index (of the jobs of [`run`]).
    Job(usize),
}

/// Counts the statements that store logs in the schema's `job_logs`, and has the database
/// refuse those `refuse` says.
async fn count_stores(db: &TestDatabase, refuse: Refuse, jobs: &[JobId]) -> anyhow::Result<()> {
    match refuse {
        Refuse::All(sqlstate) => db.fail_log_stores(u64::MAX, sqlstate).await?,
        Refuse::None | Refuse::Job(_) => db.fail_log_stores(0, "P0001").await?,
    }
    if let Refuse::Job(i) = refuse {
        let s = db.schema();
        sql(db)
            .await?
            .batch_execute(&format!(
                "CREATE FUNCTION {s}.refuse_log() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN RAISE EXCEPTION 'this job''s log is refused by the test'; END $$;
                 CREATE TRIGGER refuse_log BEFORE INSERT ON {s}.job_logs
                 FOR EACH ROW WHEN (NEW.job_id = '{}') EXECUTE FUNCTION {s}.refuse_log();",
                jobs[i]
            ))
            .await?;
    }
    Ok(())
}

/// Connects the peers (each adopts its attempts, as a worker reconnected to a restarted
/// server does), and while the test holds a lock on the log table (so the first store
/// waits), has each send its `log` requests, then a heartbeat whose answer says its
/// requests are all queued. Releases the lock and returns each peer's replies to its `log`
/// requests, in the order received, and what each request sent, by job.
async fn send_logs_behind_a_lock(
    db: &TestDatabase,
    endpoint: &str,
    jobs: &[JobId],
) -> anyhow::Result<(Vec<Vec<Value>>, HashMap<JobId, Vec<String>>)> {
    let mut peers = Vec::new();
    for i in 0..PEERS {
        let mut peer = RawPeer::connect(endpoint).await;
        let extra = vec![
            ("name", text(&format!("logger-{i}"))),
            ("queues", Value::Array(vec![text("elsewhere")])),
        ];
        let welcome = peer.hello("worker", TOKEN, extra).await;
        assert_eq!(text_of(&welcome, "type"), "welcome", "{welcome:?}");
        // Its attempts are its orders: their lines are queued for storing as they come.
        adopt(
            &mut peer,
            &jobs[i * ATTEMPTS_PER_PEER..(i + 1) * ATTEMPTS_PER_PEER],
        )
        .await;
        peers.push(peer);
    }
    let lock = sql(db).await?;
    lock.batch_execute(&format!(
        "BEGIN; LOCK TABLE {}.job_logs IN SHARE MODE",
        db.schema()
    ))
    .await?;
    let mut sent: HashMap<JobId, Vec<String>> = HashMap::new();
    for (p, peer) in peers.iter_mut().enumerate() {
        for n in 0..REQUESTS_PER_PEER {
            let id = jobs[p * ATTEMPTS_PER_PEER + n % ATTEMPTS_PER_PEER];
            let message = format!("peer {p} line {n}");
            peer.send(&log_request(n + 2, id, &message)).await;
            sent.entry(id).or_default().push(message);
        }
        peer.send(&map(vec![("type", text("heartbeat")), ("req", int(1))]))
            .await;
    }
    for peer in &mut peers {
        peer.recv_type("heartbeat_ack").await;
    }
    lock.batch_execute("COMMIT").await?;
    let mut replies = Vec::new();
    for peer in &mut peers {
        let mut mine = Vec::new();
        for _ in 0..REQUESTS_PER_PEER {
            mine.push(peer.recv().await);
        }
        replies.push(mine);
    }
    Ok((replies, sent))
}

/// What [`run`] leaves to check.
struct Run {
    db: TestDatabase,
    server: ServerHandle,
    jobs: Vec<JobId>,
    replies: Vec<Vec<Value>>,
    sent: HashMap<JobId, Vec<String>>,
}

/// A server on a fresh schema whose log stores are counted (and refused as `refuse` says),
/// and the replies to the logs of [`send_logs_behind_a_lock`].
async fn run(refuse: Refuse) -> anyhow::Result<Run> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(30)).await).await;
    let jobs = leased_by(&db, server.node_id(), PEERS * ATTEMPTS_PER_PEER).await?;
    count_stores(&db, refuse, &jobs).await?;
    let (replies, sent) = send_logs_behind_a_lock(&db, server.endpoint(), &jobs).await?;
    Ok(Run {
        db,
        server,
        jobs,
        replies,
        sent,
    })
}

/// Each reply answers the request it follows (requests numbered from 2), with `ty`.
fn assert_replies(replies: &[Vec<Value>], ty: &str) {
    for mine in replies {
        let mut reqs: Vec<i64> = mine
            .iter()
            .map(|r| {
                assert_eq!(text_of(r, "type"), ty, "{r:?}");
                field(r, "req")
                    .and_then(Value::as_integer)
                    .and_then(|i| i64::try_from(i).ok())
                    .unwrap_or(-1)
            })
            .collect();
        reqs.sort_unstable();
        let expected: Vec<i64> = (2..).take(REQUESTS_PER_PEER).collect();
        assert_eq!(reqs, expected, "one reply per request");
    }
}

/// Each reply is an `internal` error, `transient` as given.
fn assert_failed(replies: &[Vec<Value>], transient: bool) {
    assert_replies(replies, "error");
    for r in replies.iter().flatten() {
        assert_eq!(text_of(r, "code"), "internal", "{r:?}");
        assert_eq!(
            field(r, "transient"),
            Some(&Value::Bool(transient)),
            "{r:?}"
        );
    }
}

/// Every line sent for each job of `jobs` is stored, in the order sent, except that the
/// job `refused` has nothing stored.
async fn assert_stored_in_order(
    db: &TestDatabase,
    jobs: &[JobId],
    sent: &HashMap<JobId, Vec<String>>,
    refused: Option<JobId>,
) -> anyhow::Result<()> {
    let store = db.backend();
    let store = store.logs().expect("PostgreSQL keeps logs");
    for id in jobs {
        let logs = store.job_logs(*id).await?;
        if Some(*id) == refused {
            assert!(logs.is_empty(), "the refused job's lines are not stored");
            continue;
        }
        assert_eq!(logs.len(), 1, "one attempt");
        let stored: Vec<&str> = logs[0].lines.iter().map(|l| l.message.as_str()).collect();
        assert_eq!(stored, sent[id], "every line, in the order sent");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_logs_are_stored_in_order_by_fewer_statements() -> anyhow::Result<()> {
    let Run {
        db,
        server,
        jobs,
        replies,
        sent,
    } = run(Refuse::None).await?;
    assert_replies(&replies, "ack");
    for mine in &replies {
        assert!(mine.iter().all(|r| text_of(r, "result") == "recorded"));
    }
    assert_stored_in_order(&db, &jobs, &sent, None).await?;
    // The first store waited for the lock; everything else queued meanwhile and went in
    // the next one (one request a statement would be 200).
    let requests = PEERS * REQUESTS_PER_PEER;
    let statements = db.log_store_attempts().await?;
    assert!(
        statements <= 2,
        "{requests} requests stored by {statements} statements"
    );
    server.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_refusing_every_store_answers_every_request() -> anyhow::Result<()> {
    let Run {
        db,
        server,
        jobs,
        replies,
        ..
    } = run(Refuse::All("P0001")).await?;
    assert_failed(&replies, false);
    let store = db.backend();
    let store = store.logs().expect("PostgreSQL keeps logs");
    for id in &jobs {
        assert!(store.job_logs(*id).await?.is_empty(), "nothing stored");
    }
    // Each refused batch is stored again in halves down to single requests: fewer than two
    // statements a request.
    let requests = i64::try_from(PEERS * REQUESTS_PER_PEER)?;
    let statements = db.log_store_attempts().await?;
    assert!(statements < 2 * requests, "{statements} statements failed");
    server.shutdown().await;
    Ok(())
}

/// A batch that fails for a transient reason (a serialization failure) is answered at once,
/// as transient, to every request of it: not stored again in halves, nor retried here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_failure_is_answered_as_transient_to_the_whole_batch() -> anyhow::Result<()> {
    let Run {
        db,
        server,
        replies,
        ..
    } = run(Refuse::All("40001")).await?;
    assert_failed(&replies, true);
    // One statement a batch: the first (behind the lock) and what queued meanwhile.
    let statements = db.log_store_attempts().await?;
    assert!(statements <= 2, "{statements} statements failed");
    server.shutdown().await;
    Ok(())
}

/// One job whose lines the database refuses costs the others nothing: its requests are
/// answered with the refusal, every other request is stored, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_does_not_cost_the_others_their_lines() -> anyhow::Result<()> {
    let Run {
        db,
        server,
        jobs,
        replies,
        sent,
    } = run(Refuse::Job(0)).await?;
    assert_stored_in_order(&db, &jobs, &sent, Some(jobs[0])).await?;
    // Peer 0 sent its even requests (numbered from 2) for the refused job.
    for (p, mine) in replies.iter().enumerate() {
        for r in mine {
            let req = field(r, "req")
                .and_then(Value::as_integer)
                .and_then(|i| i64::try_from(i).ok())
                .unwrap_or(-1);
            if p == 0 && req % 2 == 0 {
                assert_eq!(text_of(r, "type"), "error", "{r:?}");
                assert!(
                    text_of(r, "message").contains("refused by the test"),
                    "{r:?}"
                );
            } else {
                assert_eq!(text_of(r, "result"), "recorded", "{r:?}");
            }
        }
    }
    server.shutdown().await;
    Ok(())
}
