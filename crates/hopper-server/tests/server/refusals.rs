//! Values the protocol refuses reach no table: each is answered `invalid` (or
//! `unauthorized`) with a message naming the field, in plain words, and the peer's session
//! goes on.

use std::time::Duration;

use crate::common::*;
use ciborium::Value;
use hopper::testing::TestDatabase;

/// A server on `db` and a peer that said hello with the admin token.
async fn admin_peer(db: &TestDatabase) -> anyhow::Result<(hopper_server::ServerHandle, RawPeer)> {
    let server = start(config(db, Duration::from_secs(5)).await).await;
    let mut peer = RawPeer::connect(server.endpoint()).await;
    let r = peer.hello("client", TOKEN, vec![]).await;
    assert_eq!(text_of(&r, "type"), "welcome", "{r:?}");
    Ok((server, peer))
}

/// Sends `request` and returns the error reply's code and message.
async fn refusal(peer: &mut RawPeer, request: Value) -> (String, String) {
    peer.send(&request).await;
    let r = peer.recv().await;
    assert_eq!(text_of(&r, "type"), "error", "{r:?}");
    (
        text_of(&r, "code").to_owned(),
        text_of(&r, "message").to_owned(),
    )
}

/// How many jobs the test's schema holds.
async fn job_count(db: &TestDatabase) -> anyhow::Result<i64> {
    let sql = sql(db).await?;
    let row = sql
        .query_one(&format!("SELECT count(*) FROM {}.jobs", db.schema()), &[])
        .await?;
    Ok(row.get(0))
}

#[tokio::test]
async fn nan_infinity_and_undefined_in_args_and_meta_are_refused() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (server, mut peer) = admin_peer(&db).await?;
    let submit = |args: Value, meta: Value| {
        map(vec![
            ("type", text("submit")),
            ("req", int(2)),
            (
                "job",
                map(vec![("kind", text("k")), ("args", args), ("meta", meta)]),
            ),
        ])
    };
    let empty = map(vec![]);
    for (request, field) in [
        (
            submit(map(vec![("ratio", Value::Float(f64::NAN))]), empty.clone()),
            "job.args.ratio",
        ),
        (
            submit(
                Value::Array(vec![Value::Float(f64::INFINITY)]),
                empty.clone(),
            ),
            "job.args[0]",
        ),
        (
            submit(
                empty.clone(),
                map(vec![("t", Value::Float(f64::NEG_INFINITY))]),
            ),
            "job.meta.t",
        ),
    ] {
        let (code, message) = refusal(&mut peer, request).await;
        assert_eq!(code, "invalid", "{message}");
        assert!(message.contains(field), "{message}");
    }
    // `undefined` (0xf7), which ciborium reads as null.
    let mut frame = Vec::new();
    ciborium::into_writer(
        &submit(map(vec![("gone", Value::Null)]), empty.clone()),
        &mut frame,
    )?;
    let null = frame.iter().rposition(|&b| b == 0xf6).expect("the null");
    frame[null] = 0xf7;
    peer.send_bytes(frame).await;
    let r = peer.recv().await;
    assert_eq!(text_of(&r, "code"), "invalid", "{r:?}");
    assert!(
        text_of(&r, "message").contains("job.args.gone: undefined"),
        "{r:?}"
    );
    assert_eq!(job_count(&db).await?, 0);

    // The same job with finite numbers goes in.
    peer.send(&submit(map(vec![("ratio", Value::Float(0.5))]), empty))
        .await;
    assert_eq!(text_of(&peer.recv().await, "type"), "submitted");
    assert_eq!(job_count(&db).await?, 1);
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_value_of_the_wrong_type_is_refused_naming_its_path() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (server, mut peer) = admin_peer(&db).await?;
    let submit = |job: Vec<(&str, Value)>| {
        map(vec![
            ("type", text("submit")),
            ("req", int(2)),
            ("job", map(job)),
        ])
    };
    for (request, said) in [
        (
            map(vec![
                ("type", text("retry_failed")),
                ("req", int(2)),
                ("queue", int(5)),
            ]),
            "retry_failed: queue: invalid type: integer `5`, expected a string",
        ),
        (
            submit(vec![("kind", text("k")), ("queue", int(5))]),
            "submit: job.queue: invalid type: integer `5`, expected a string",
        ),
    ] {
        assert_eq!(
            refusal(&mut peer, request).await,
            ("invalid".to_owned(), said.to_owned())
        );
    }
    // A hello with a wrong type is refused alike, and the session goes on.
    let r = peer
        .hello("worker", TOKEN, vec![("concurrency", text("x"))])
        .await;
    assert_eq!(
        (text_of(&r, "code"), text_of(&r, "message")),
        (
            "invalid",
            "hello: concurrency: invalid type: string \"x\", expected u32"
        )
    );
    assert_eq!(job_count(&db).await?, 0);
    peer.send(&submit(vec![("kind", text("k")), ("queue", text("mail"))]))
        .await;
    assert_eq!(text_of(&peer.recv().await, "type"), "submitted");
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn byte_strings_and_integers_beyond_64_bits_are_refused_naming_their_path()
-> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (server, mut peer) = admin_peer(&db).await?;
    let bytes = |s: &str| Value::Bytes(s.as_bytes().to_vec());
    let submit = |job: Vec<(&str, Value)>| {
        map(vec![
            ("type", text("submit")),
            ("req", int(2)),
            ("job", map(job)),
        ])
    };
    // -2^63 - 1: a CBOR negative integer that no 64-bit integer holds.
    let below_i64 = Value::Integer((-(1_i128 << 63) - 1).try_into()?);
    for (request, said) in [
        (
            submit(vec![("kind", text("k")), ("queue", bytes("mail"))]),
            "submit: job.queue: a byte string: the protocol's values are JSON values",
        ),
        (
            submit(vec![("kind", bytes("k"))]),
            "submit: job.kind: a byte string",
        ),
        (
            submit(vec![
                ("kind", text("k")),
                ("args", map(vec![("to", bytes("a@b"))])),
            ]),
            "submit: job.args.to: a byte string",
        ),
        (
            submit(vec![
                ("kind", text("k")),
                ("args", map(vec![("n", below_i64)])),
            ]),
            "submit: job.args.n: the integer -9223372036854775809 does not fit in 64 bits",
        ),
    ] {
        let (code, message) = refusal(&mut peer, request).await;
        assert_eq!(code, "invalid", "{message}");
        assert!(message.starts_with(said), "{message}");
    }
    assert_eq!(job_count(&db).await?, 0);
    let lowest = Value::Integer(i64::MIN.into());
    peer.send(&submit(vec![
        ("kind", text("k")),
        ("args", map(vec![("n", lowest)])),
    ]))
    .await;
    assert_eq!(text_of(&peer.recv().await, "type"), "submitted");
    assert_eq!(job_count(&db).await?, 1);
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_negative_run_time_is_refused_and_nothing_is_written() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let mut worker = RawPeer::connect(server.endpoint()).await;
    let r = worker
        .hello("worker", TOKEN, vec![("concurrency", int(2))])
        .await;
    assert_eq!(text_of(&r, "type"), "welcome", "{r:?}");
    let client = hopper::Client::new(db.backend());
    client
        .insert(hopper::NewJob::new("k", serde_json::json!({})))
        .await?;
    let (id, attempt) = order(&mut worker).await;
    worker.set_timeout(Duration::from_secs(10));
    let lease = |outcome: &str, duration: i64| {
        vec![
            ("id", text(&id)),
            ("attempt", int(attempt)),
            ("duration_ms", int(duration)),
            (
                if outcome == "failed" { "error" } else { "note" },
                text("e"),
            ),
        ]
    };
    for outcome in ["completed", "failed"] {
        let mut entries = vec![("type", text(outcome)), ("req", int(3))];
        entries.extend(lease(outcome, -5));
        let (code, message) = refusal(&mut worker, map(entries)).await;
        assert_eq!(code, "invalid", "{message}");
        assert!(
            message.contains("duration_ms must be 0 or more"),
            "{message}"
        );
    }
    let mut item = vec![("outcome", text("completed"))];
    item.extend(lease("completed", -5));
    let request = map(vec![
        ("type", text("outcomes")),
        ("req", int(4)),
        ("outcomes", Value::Array(vec![map(item)])),
    ]);
    let (code, message) = refusal(&mut worker, request).await;
    assert_eq!(code, "invalid", "{message}");
    assert!(
        message.starts_with("outcome 0:") && message.contains("duration_ms must be 0 or more"),
        "{message}"
    );

    // Still running, then recorded with a real run time.
    let job = client.job(id.parse()?).await?.expect("the job");
    assert_eq!(job.state, hopper::JobState::Running);
    let mut entries = vec![("type", text("completed")), ("req", int(5))];
    entries.extend(lease("completed", 7));
    worker.send(&map(entries)).await;
    let r = worker.recv_type("ack").await;
    assert_eq!(text_of(&r, "result"), "recorded", "{r:?}");
    let job = client.job(id.parse()?).await?.expect("the job");
    assert_eq!(job.duration_ms, Some(7));
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn admin_requests_check_queue_and_kind_names_before_any_query() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (server, mut peer) = admin_peer(&db).await?;
    let client = hopper::Client::new(db.backend());
    client
        .insert(hopper::NewJob::new("k", serde_json::json!({})))
        .await?;
    let long = "q".repeat(100_000);
    let mut req = 10;
    for bad in ["", "a b", "\u{0}", long.as_str()] {
        let requests = [
            vec![("type", text("clear")), ("queue", text(bad))],
            vec![("type", text("retry_failed")), ("queue", text(bad))],
            vec![("type", text("retry_failed")), ("kind", text(bad))],
            vec![
                ("type", text("list_jobs")),
                ("filter", map(vec![("queue", text(bad))])),
            ],
            vec![
                ("type", text("list_jobs")),
                ("filter", map(vec![("kind", text(bad))])),
            ],
            vec![
                ("type", text("update_queue")),
                (
                    "update",
                    map(vec![("queue", text(bad)), ("paused", Value::Bool(true))]),
                ),
            ],
        ];
        for mut request in requests {
            req += 1;
            request.push(("req", int(req)));
            let (code, message) = refusal(&mut peer, map(request)).await;
            assert_eq!(code, "invalid", "{bad:.20?}: {message}");
            assert!(message.contains(" name "), "{message:.300}");
            assert!(message.len() < 300, "{message:.300}");
        }
    }
    // Nothing was cleared.
    assert_eq!(job_count(&db).await?, 1);
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn error_messages_are_sentences_that_echo_little_of_the_peer() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (server, mut peer) = admin_peer(&db).await?;
    // An unknown type of 2 MB is named by its first 64 characters.
    let huge = "t".repeat(2_000_000);
    let (code, message) =
        refusal(&mut peer, map(vec![("type", text(&huge)), ("req", int(2))])).await;
    assert_eq!(code, "unknown_type");
    assert!(message.len() < 1000, "{:.300}", message);
    assert!(message.contains("ttt…(2000000 bytes)"), "{:.300}", message);
    // So is a bad value of a field.
    let (code, message) = refusal(
        &mut peer,
        map(vec![
            ("type", text("status")),
            ("req", int(3)),
            ("id", text(&huge)),
        ]),
    )
    .await;
    assert_eq!(code, "invalid");
    assert!(message.len() < 1000, "{:.300}", message);
    // Plain sentences naming the field.
    let submit = |field: &str, value: Value| {
        map(vec![
            ("type", text("submit")),
            ("req", int(4)),
            ("job", map(vec![("kind", text("k")), (field, value)])),
        ])
    };
    let (_, message) = refusal(&mut peer, submit("run_at", text("infinity"))).await;
    assert!(
        message.contains("run_at: not an RFC 3339 time"),
        "{message}"
    );
    let (_, message) = refusal(&mut peer, submit("priority", int(32768))).await;
    assert!(
        message.contains("priority: must be -32768..32767 or high/normal/low, got 32768"),
        "{message}"
    );
    let mut frame = Vec::new();
    ciborium::into_writer(&submit("args", map(vec![])), &mut frame)?;
    frame.pop();
    frame.push(0xa1);
    peer.send_bytes(frame).await;
    let r = peer.recv().await;
    assert_eq!(
        (text_of(&r, "code"), text_of(&r, "message")),
        (
            "bad_frame",
            "not CBOR: the frame ends in the middle of a value"
        )
    );
    assert_eq!(job_count(&db).await?, 0);
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_filter_given_as_an_array_is_refused() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (server, mut peer) = admin_peer(&db).await?;
    for filter in [vec![], vec![text("mail")]] {
        let request = map(vec![
            ("type", text("list_jobs")),
            ("req", int(2)),
            ("filter", Value::Array(filter)),
        ]);
        let (code, message) = refusal(&mut peer, request).await;
        assert_eq!(code, "invalid", "{message}");
        assert_eq!(message, "list_jobs: filter: must be a map, got an array");
    }
    peer.send(&map(vec![
        ("type", text("list_jobs")),
        ("req", int(3)),
        ("filter", map(vec![("queue", text("mail"))])),
    ]))
    .await;
    assert_eq!(text_of(&peer.recv().await, "type"), "jobs");
    server.shutdown().await;
    Ok(())
}

/// A log line's `at` is an instant like any other a peer gives: outside 1970 … 9999 it is
/// refused, naming the line, and nothing of the request is stored: a year before the common
/// era (`-0001-…`, which no RFC 3339 time has) would reach every reader of the log (the
/// HTTP API, the dashboard, the clients).
#[tokio::test]
async fn a_log_line_at_out_of_range_is_refused_and_nothing_is_stored() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (server, mut peer) = admin_peer(&db).await?;
    let id = leased_by(&db, server.node_id(), 1).await?[0];
    for (req, at) in [
        (2, "-0001-01-01T00:00:00Z"),
        (3, "0000-06-01T00:00:00Z"),
        (4, "1969-12-31T23:59:59Z"),
    ] {
        let request = request_with_line_at(log_request(req, id, "too early"), at);
        let (code, message) = refusal(&mut peer, request).await;
        assert_eq!(code, "invalid", "{message}");
        assert!(
            message.contains("line 0") && message.contains("out of range"),
            "{at}: {message}"
        );
    }
    let sql = sql(&db).await?;
    let row = sql
        .query_one(
            &format!("SELECT count(*) FROM {}.job_logs", db.schema()),
            &[],
        )
        .await?;
    assert_eq!(row.get::<_, i64>(0), 0, "nothing stored");

    // The bounds themselves are taken.
    for (req, at) in [(5, "1970-01-01T00:00:00Z"), (6, "9999-12-31T23:59:59Z")] {
        peer.send(&request_with_line_at(log_request(req, id, "in range"), at))
            .await;
        let r = peer.recv().await;
        assert_eq!(text_of(&r, "type"), "ack", "{at}: {r:?}");
    }
    server.shutdown().await;
    Ok(())
}

/// `request` (a `log` of one line) with that line's `at` set.
fn request_with_line_at(mut request: Value, at: &str) -> Value {
    if let Value::Map(entries) = &mut request
        && let Some((_, Value::Array(lines))) = entries
            .iter_mut()
            .find(|(k, _)| k.as_text() == Some("lines"))
        && let Some(Value::Map(line)) = lines.first_mut()
    {
        line.retain(|(k, _)| k.as_text() != Some("at"));
        line.push((text("at"), text(at)));
    }
    request
}
