//! Security of `hopper serve` against the real server and database: peers without a valid
//! token are refused and logged (the tokens themselves never logged); a worker cannot
//! report, extend, heartbeat or log a job leased to another peer or running on another
//! node; oversized and deeply nested frames are refused with clear errors while other
//! peers keep being served.
//!
//! Every test of this binary logs into one capture (a global subscriber), so each assertion
//! about the logs looks for what only its own test logs (a peer name of its own).

use std::time::Duration;

use crate::common::*;
use ciborium::Value;
use hopper::backend::{Finish, FinishResult, JobGetParams, Outcome};
use hopper::core::Lease;
use hopper::testing::TestDatabase;
use hopper::{JobState, NewJob};
use uuid::Uuid;

fn assert_no_secret(secrets: &[&str]) {
    let all = logs();
    for secret in secrets {
        assert!(
            !all.contains(secret),
            "a secret reached the logs: {:?}",
            all.lines().find(|l| l.contains(secret))
        );
    }
}

#[tokio::test]
async fn peers_without_a_valid_token_are_refused_logged_and_tokens_never_logged()
-> anyhow::Result<()> {
    logs();
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let endpoint = server.endpoint().to_owned();
    let wrong = format!("wrong-{}", Uuid::now_v7().simple());
    let intruder = format!("intruder-{}", Uuid::now_v7().simple());

    // Before any hello: refused, and nothing done.
    let mut bad = RawPeer::connect(&endpoint).await;
    let submit = map(vec![
        ("type", text("submit")),
        ("req", int(3)),
        ("job", map(vec![("kind", text("sneaky"))])),
    ]);
    bad.send(&submit).await;
    assert_eq!(text_of(&bad.recv().await, "code"), "unauthorized");
    // A wrong token, no token, an empty token, the right one with a byte more.
    let name = ("name", text(&intruder));
    let r = bad.hello("worker", &wrong, vec![name.clone()]).await;
    assert_eq!(text_of(&r, "code"), "unauthorized");
    let mut no_token = map(vec![
        ("type", text("hello")),
        ("req", int(1)),
        ("version", int(1)),
        ("role", text("client")),
        name.clone(),
    ]);
    bad.send(&no_token).await;
    assert_eq!(text_of(&bad.recv().await, "code"), "unauthorized");
    if let Value::Map(entries) = &mut no_token {
        entries.push((text("token"), Value::Null));
    }
    bad.send(&no_token).await;
    assert_eq!(text_of(&bad.recv().await, "code"), "unauthorized");
    for token in ["", &format!("{TOKEN}x"), &TOKEN[1..]] {
        let r = bad.hello("client", token, vec![name.clone()]).await;
        assert_eq!(text_of(&r, "code"), "unauthorized", "{token:?}");
    }
    // Still refused after all those hellos: none of them opened a session.
    bad.send(&submit).await;
    assert_eq!(text_of(&bad.recv().await, "code"), "unauthorized");
    assert_eq!(db.queue_stats("default").await?.available, 0);

    // A good peer (through the Rust client, whose URL carries the token) is served.
    let client = hopper::Client::new(
        hopper::connect(&format!("{}&name=good", url(&endpoint)), Default::default()).await?,
    );
    client
        .insert(NewJob::new("fine", serde_json::json!({})))
        .await?;
    assert_eq!(db.queue_stats("default").await?.available, 1);

    // Refusals are rate-limited: the first is logged with the peer's name, the rest of the
    // burst only counted (in the next line logged).
    let refused = lines_with(&intruder);
    assert!(
        !refused.is_empty() && refused.iter().all(|l| l.contains("refused a hello")),
        "a refused hello is logged with the peer's name: {refused:#?}"
    );
    assert!(
        refused.iter().all(|l| l.contains("WARN")),
        "refusals are warnings: {refused:#?}"
    );
    assert!(
        !lines_with("refused a request before hello").is_empty(),
        "a request before hello is logged"
    );
    assert_no_secret(&[TOKEN, &wrong]);
    server.shutdown().await;
    assert_no_secret(&[TOKEN, &wrong]);
    Ok(())
}

/// A worker hello for `kind`, concurrency 1.
async fn worker(endpoint: &str, name: &str, kind: &str) -> RawPeer {
    let mut peer = RawPeer::connect(endpoint).await;
    let extra = vec![
        ("name", text(name)),
        ("kinds", Value::Array(vec![text(kind)])),
        ("concurrency", int(1)),
    ];
    let r = peer.hello("worker", TOKEN, extra).await;
    assert_eq!(text_of(&r, "type"), "welcome", "{r:?}");
    peer
}

#[tokio::test]
async fn a_worker_cannot_report_extend_or_heartbeat_another_workers_job() -> anyhow::Result<()> {
    logs();
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let endpoint = server.endpoint().to_owned();
    let mut a = worker(&endpoint, "holder-a", "victim").await;
    let thief_name = format!("thief-{}", Uuid::now_v7().simple());
    let mut b = worker(&endpoint, &thief_name, "bystander").await;
    let backend = db.backend();
    let victim = NewJob::new("victim", serde_json::json!({"n": 1}));
    let job_id = victim.id;
    backend.job_insert(&victim).await?;
    let (id, attempt) = order(&mut a).await;
    assert_eq!(id, job_id.to_string());

    let lease = |ty: &str, req: i64, extra: Vec<(&'static str, Value)>| {
        let mut entries = vec![
            ("type", text(ty)),
            ("req", int(req)),
            ("id", text(&id)),
            ("attempt", int(attempt)),
        ];
        entries.extend(extra);
        map(entries)
    };
    let attempts = [
        lease("completed", 2, vec![("duration_ms", int(1))]),
        lease(
            "failed",
            3,
            vec![("error", text("stolen")), ("retryable", Value::Bool(false))],
        ),
        lease("snoozed", 4, vec![("delay_ms", int(3_600_000))]),
        lease("released", 5, vec![]),
        lease("extend", 6, vec![("by_ms", int(1))]),
        lease(
            "log",
            10,
            vec![(
                "lines",
                Value::Array(vec![map(vec![
                    ("level", text("info")),
                    ("message", text("stolen")),
                ])]),
            )],
        ),
    ];
    for (n, message) in attempts.iter().enumerate() {
        b.send(message).await;
        let r = b.recv().await;
        assert_eq!(
            (text_of(&r, "type"), text_of(&r, "result")),
            ("ack", "lease_lost"),
            "attempt {n}: {r:?}"
        );
    }
    // The batched form too.
    let item = map(vec![
        ("outcome", text("completed")),
        ("id", text(&id)),
        ("attempt", int(attempt)),
    ]);
    b.send(&map(vec![
        ("type", text("outcomes")),
        ("req", int(9)),
        ("outcomes", Value::Array(vec![item])),
    ]))
    .await;
    let r = b.recv_type("acks").await;
    assert_eq!(
        field(&r, "results"),
        Some(&Value::Array(vec![text("lease_lost")]))
    );
    let lease_ref = map(vec![("id", text(&id)), ("attempt", int(attempt))]);
    b.send(&map(vec![
        ("type", text("heartbeat")),
        ("req", int(7)),
        ("leases", Value::Array(vec![lease_ref.clone()])),
    ]))
    .await;
    let r = b.recv_type("heartbeat_ack").await;
    assert_eq!(field(&r, "lost"), Some(&Value::Array(vec![lease_ref])));

    // The job is untouched: still running under A's lease, no error recorded.
    let job = backend
        .job_get(&JobGetParams { id: job_id })
        .await?
        .ok_or_else(|| anyhow::anyhow!("job gone"))?;
    assert_eq!(job.state, JobState::Running);
    assert_eq!(i64::from(job.attempt), attempt);
    assert!(job.errors.is_empty(), "{:?}", job.errors);
    // B's heartbeat did not adopt it: A still holds it and completes it.
    a.send(&lease("completed", 8, vec![("duration_ms", int(5))]))
        .await;
    let r = a.recv_type("ack").await;
    assert_eq!(text_of(&r, "result"), "recorded", "{r:?}");
    let job = backend
        .job_get(&JobGetParams { id: job_id })
        .await?
        .ok_or_else(|| anyhow::anyhow!("job gone"))?;
    assert_eq!(job.state, JobState::Completed);
    let logs = backend.logs().expect("PostgreSQL keeps logs");
    assert!(
        logs.job_logs(job_id).await?.is_empty(),
        "the thief's lines are not stored"
    );

    let refused = lines_with("leased to another peer");
    assert!(
        refused.iter().filter(|l| l.contains(&id)).count() >= 5,
        "each refused outcome is logged with the job id: {refused:#?}"
    );
    assert!(
        refused
            .iter()
            .any(|l| l.contains("refused a heartbeat") && l.contains("WARN")),
        "{refused:#?}"
    );
    assert_no_secret(&[TOKEN]);
    server.shutdown().await;
    Ok(())
}

/// A job running on another node (another server, a runtime on the database) is held by
/// no peer of this server, but it is not this server's: a worker that knows its id and
/// attempt (`status` shows both) can neither finish, extend nor adopt it here. The jobs of
/// this server's own node that no peer holds (what its earlier run sent out) can be.
#[tokio::test]
async fn a_worker_cannot_finish_or_extend_a_job_running_on_another_node() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let config = config(&db, Duration::from_secs(5)).await;
    let own = leased_by(&db, config.node_id, 1).await?[0];
    let elsewhere = attempts(&db, 2).await?;
    let server = start(config).await;
    let mut thief = worker(server.endpoint(), "node-thief", "bystander").await;

    let lease = |ty: &str, req: i64, id: &hopper::JobId, extra: Vec<(&'static str, Value)>| {
        let mut entries = vec![
            ("type", text(ty)),
            ("req", int(req)),
            ("id", text(&id.to_string())),
            ("attempt", int(1)),
        ];
        entries.extend(extra);
        map(entries)
    };
    let target = &elsewhere[0];
    let attempts = [
        lease("extend", 2, target, vec![("by_ms", int(1))]),
        lease("completed", 3, target, vec![("duration_ms", int(1))]),
        lease(
            "failed",
            4,
            target,
            vec![("error", text("stolen")), ("retryable", Value::Bool(false))],
        ),
        lease("released", 5, target, vec![]),
    ];
    for (n, message) in attempts.iter().enumerate() {
        thief.send(message).await;
        let r = thief.recv_type("ack").await;
        assert_eq!(text_of(&r, "result"), "lease_lost", "attempt {n}: {r:?}");
    }
    let item = |id: &hopper::JobId| {
        map(vec![
            ("outcome", text("completed")),
            ("id", text(&id.to_string())),
            ("attempt", int(1)),
        ])
    };
    thief
        .send(&map(vec![
            ("type", text("outcomes")),
            ("req", int(6)),
            ("outcomes", Value::Array(vec![item(target), item(&own)])),
        ]))
        .await;
    let r = thief.recv_type("acks").await;
    assert_eq!(
        field(&r, "results"),
        Some(&Value::Array(vec![text("lease_lost"), text("recorded")])),
        "another node's job refused, this node's recorded"
    );
    // A heartbeat neither keeps it alive nor adopts it: lost, and an outcome after it too.
    let other = &elsewhere[1];
    let lease_ref = map(vec![("id", text(&other.to_string())), ("attempt", int(1))]);
    thief
        .send(&map(vec![
            ("type", text("heartbeat")),
            ("req", int(7)),
            ("leases", Value::Array(vec![lease_ref.clone()])),
        ]))
        .await;
    let r = thief.recv_type("heartbeat_ack").await;
    assert_eq!(field(&r, "lost"), Some(&Value::Array(vec![lease_ref])));
    thief
        .send(&lease("completed", 8, other, vec![("duration_ms", int(1))]))
        .await;
    let r = thief.recv_type("ack").await;
    assert_eq!(text_of(&r, "result"), "lease_lost", "{r:?}");

    let backend = db.backend();
    for id in &elsewhere {
        let job = backend
            .job_get(&JobGetParams { id: *id })
            .await?
            .ok_or_else(|| anyhow::anyhow!("job gone"))?;
        assert_eq!(job.state, JobState::Running, "untouched: {job:?}");
        assert!(job.errors.is_empty(), "{:?}", job.errors);
        assert!(
            job.lease_expires_at > Some(chrono::Utc::now() + chrono::Duration::seconds(60)),
            "its lease not moved: {job:?}"
        );
    }
    let job = backend
        .job_get(&JobGetParams { id: own })
        .await?
        .ok_or_else(|| anyhow::anyhow!("job gone"))?;
    assert_eq!(job.state, JobState::Completed);
    server.shutdown().await;
    Ok(())
}

/// Log lines are taken as outcomes are: for a job running on another node that no peer of
/// this server holds, `lease_lost`, stored nowhere; for one of this server's node (an
/// order of its earlier run), stored, each request of the same attempt in the order sent
/// although the attempt is looked up first.
#[tokio::test]
async fn a_worker_cannot_log_for_a_job_running_on_another_node() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let config = config(&db, Duration::from_secs(5)).await;
    let own = leased_by(&db, config.node_id, 1).await?[0];
    let elsewhere = attempts(&db, 1).await?[0];
    let server = start(config).await;
    let mut thief = worker(server.endpoint(), "log-thief", "bystander").await;

    // Sent at once, without waiting for the answers.
    let requests = [
        (2_i64, elsewhere, "stolen 1"),
        (3, own, "mine 1"),
        (4, own, "mine 2"),
        (5, elsewhere, "stolen 2"),
        (6, own, "mine 3"),
    ];
    for (req, id, message) in requests {
        thief
            .send(&log_request(usize::try_from(req)?, id, message))
            .await;
    }
    let mut results = std::collections::HashMap::new();
    for _ in requests {
        let r = thief.recv_type("ack").await;
        let req = field(&r, "req").and_then(Value::as_integer).map(i128::from);
        results.insert(req, text_of(&r, "result").to_owned());
    }
    for (req, id, _) in requests {
        let expected = if id == own { "recorded" } else { "lease_lost" };
        assert_eq!(
            results[&Some(i128::from(req))],
            expected,
            "{req}: {results:?}"
        );
    }
    assert!(
        stored_lines(&db, elsewhere).await?.is_empty(),
        "another node's job has no lines of this worker"
    );
    let mine = vec!["mine 1", "mine 2", "mine 3"]
        .into_iter()
        .map(String::from);
    assert_eq!(stored_lines(&db, own).await?, [(1, mine.collect())]);
    server.shutdown().await;
    Ok(())
}

/// A finished job takes lines only for its latest attempt on the node it ran under: a
/// worker of this server logs for this node's completed job, never for another node's.
#[tokio::test]
async fn a_worker_cannot_log_for_a_finished_job_of_another_node() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let config = config(&db, Duration::from_secs(5)).await;
    let own = leased_by(&db, config.node_id, 1).await?[0];
    let elsewhere = attempts(&db, 1).await?[0];
    let done = |job_id| Finish {
        lease: Lease { job_id, attempt: 1 },
        outcome: Outcome::Completed { duration_ms: 1 },
    };
    let results = db
        .backend()
        .job_finish_many(&[done(own), done(elsewhere)])
        .await?;
    assert!(
        results
            .iter()
            .all(|r| matches!(r, FinishResult::Recorded(_))),
        "{results:?}"
    );
    let server = start(config).await;
    let mut thief = worker(server.endpoint(), "finished-log-thief", "bystander").await;

    thief.send(&log_request(2, elsewhere, "stolen")).await;
    let r = thief.recv_type("ack").await;
    assert_eq!(text_of(&r, "result"), "lease_lost", "{r:?}");
    thief.send(&log_request(3, own, "mine")).await;
    let r = thief.recv_type("ack").await;
    assert_eq!(text_of(&r, "result"), "recorded", "{r:?}");
    assert!(
        stored_lines(&db, elsewhere).await?.is_empty(),
        "another node's finished job has no lines of this worker"
    );
    assert_eq!(
        stored_lines(&db, own).await?,
        [(1, vec!["mine".to_owned()])]
    );
    server.shutdown().await;
    Ok(())
}

/// A submit whose `args` are `depth` nested arrays, as raw CBOR (no encoder recursion).
fn nested_submit(depth: usize) -> Vec<u8> {
    let mut frame = Vec::new();
    let head = map(vec![
        ("type", text("submit")),
        ("req", int(21)),
        (
            "job",
            map(vec![("kind", text("deep")), ("args", Value::Null)]),
        ),
    ]);
    ciborium::into_writer(&head, &mut frame).expect("encodes");
    // The encoding ends with the null (0xf6) of `args`: put the nesting in its place.
    frame.pop();
    frame.extend(std::iter::repeat_n(0x81, depth));
    frame.push(0xa0);
    frame
}

#[tokio::test]
async fn oversized_and_deeply_nested_frames_are_refused_and_others_still_served()
-> anyhow::Result<()> {
    logs();
    let db = TestDatabase::new().await?;
    let mut config = config(&db, Duration::from_secs(5)).await;
    config.max_frame = 64 * 1024;
    let server = start(config).await;
    let endpoint = server.endpoint().to_owned();
    let mut bad = RawPeer::connect(&endpoint).await;
    let r = bad.hello("client", TOKEN, vec![]).await;
    assert_eq!(text_of(&r, "type"), "welcome");
    assert_eq!(field(&r, "max_frame"), Some(&int(64 * 1024)));

    // One byte over the limit: refused unread, with the sizes in the message.
    let mut big = vec![0x5a, 0x00, 0x01, 0x00, 0x00];
    big.resize(64 * 1024 + 1, b'x');
    bad.send_bytes(big).await;
    let r = bad.recv().await;
    assert_eq!(text_of(&r, "code"), "too_large");
    assert!(text_of(&r, "message").contains("65537"), "{r:?}");

    // Arguments over 1 MiB within a frame the server allows: a clear `invalid`.
    let mut config = crate::common::config(&db, Duration::from_secs(5)).await;
    config.node_id = Uuid::now_v7();
    let roomy = start(config).await;
    let mut peer = RawPeer::connect(roomy.endpoint()).await;
    let r = peer.hello("client", TOKEN, vec![]).await;
    assert_eq!(text_of(&r, "type"), "welcome");
    // 100,000 levels of nesting: refused by the decoder's depth limit, no stack overflow.
    peer.send_bytes(nested_submit(100_000)).await;
    let r = peer.recv().await;
    assert_eq!(text_of(&r, "code"), "bad_frame", "{r:?}");
    assert!(text_of(&r, "message").contains("nested deeper"), "{r:?}");
    // Nesting under the decoder's limit decodes; the job is stored as sent.
    peer.send_bytes(nested_submit(100)).await;
    let r = peer.recv().await;
    assert_eq!(text_of(&r, "type"), "submitted", "{r:?}");
    peer.send(&map(vec![
        ("type", text("submit")),
        ("req", int(22)),
        (
            "job",
            map(vec![
                ("kind", text("fat")),
                ("args", map(vec![("blob", text(&"y".repeat(1 << 20)))])),
            ]),
        ),
    ]))
    .await;
    let r = peer.recv().await;
    assert_eq!(text_of(&r, "code"), "invalid", "{r:?}");
    assert!(text_of(&r, "message").contains("over the limit"), "{r:?}");
    // The Rust client refuses the same before sending.
    let client = hopper::Client::new(hopper::connect(&url(&endpoint), Default::default()).await?);
    let fat = NewJob::new("fat", serde_json::json!({ "blob": "z".repeat(1 << 20) }));
    let err = client.insert(fat).await.expect_err("refused");
    assert!(err.to_string().contains("over the limit"), "{err}");

    // Everyone is still served.
    client
        .insert(NewJob::new("after", serde_json::json!({})))
        .await?;
    bad.send(&map(vec![("type", text("heartbeat")), ("req", int(23))]))
        .await;
    assert_eq!(text_of(&bad.recv().await, "type"), "heartbeat_ack");
    let stats = db.queue_stats("default").await?;
    assert_eq!(stats.available, 2, "the nested job and the last one");
    assert!(!lines_with("code=too_large").is_empty() || !lines_with("too_large").is_empty());
    roomy.shutdown().await;
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn refused_hellos_are_logged_capped_and_rate_limited() -> anyhow::Result<()> {
    logs();
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let mut peer = RawPeer::connect(server.endpoint()).await;
    let marker = format!("flood-{}", Uuid::now_v7().simple());
    let name = format!("{marker}{}\n{}", "x".repeat(100_000), "y".repeat(100_000));
    for _ in 0..20 {
        let r = peer
            .hello(
                "worker",
                "wrong-token-0123456789",
                vec![("name", text(&name))],
            )
            .await;
        assert_eq!(text_of(&r, "code"), "unauthorized");
    }
    let lines = lines_with(&marker);
    assert!(
        lines.len() == 1,
        "20 refusals within seconds make one line: {}",
        lines.len()
    );
    assert!(
        lines[0].len() < 500,
        "the name is cut in the log: {} bytes",
        lines[0].len()
    );
    let length = format!("({} bytes)", name.len());
    assert!(lines[0].contains(&length), "{}", lines[0]);
    server.shutdown().await;
    Ok(())
}
