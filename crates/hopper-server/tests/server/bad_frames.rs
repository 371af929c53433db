//! Malformed, oversized and unauthenticated traffic is refused with the right error code,
//! and never disturbs a well-behaved peer working at the same time.

use std::time::Duration;

use crate::common::*;
use ciborium::Value;
use hopper::testing::TestDatabase;

#[tokio::test]
async fn bad_peers_are_refused_while_a_good_one_keeps_working() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let endpoint = server.endpoint().to_owned();

    // A well-behaved client submits jobs all along.
    let good = tokio::spawn({
        let endpoint = endpoint.clone();
        async move {
            let client =
                hopper::Client::new(hopper::connect(&url(&endpoint), Default::default()).await?);
            let mut ids = Vec::new();
            for n in 0..200 {
                ids.push(
                    client
                        .insert(hopper::NewJob::new("good", serde_json::json!({ "n": n })))
                        .await?,
                );
            }
            anyhow::Ok(ids)
        }
    });

    let mut bad = RawPeer::connect(&endpoint).await;
    // Before hello: unauthorized, with the req echoed.
    bad.send(&map(vec![
        ("type", text("status")),
        ("req", int(5)),
        ("id", text(&uuid::Uuid::nil().to_string())),
    ]))
    .await;
    let r = bad.recv().await;
    assert_eq!(
        (text_of(&r, "type"), text_of(&r, "code")),
        ("error", "unauthorized")
    );
    assert_eq!(field(&r, "req"), Some(&int(5)));
    // A wrong token.
    let r = bad.hello("client", "wrong-token", vec![]).await;
    assert_eq!(text_of(&r, "code"), "unauthorized");
    // Garbage bytes, before and after a hello.
    bad.send_bytes(b"\xff\xfe\x00 not cbor at all".to_vec())
        .await;
    assert_eq!(text_of(&bad.recv().await, "code"), "bad_frame");
    let r = bad.hello("client", TOKEN, vec![]).await;
    assert_eq!(text_of(&r, "type"), "welcome", "{r:?}");
    bad.send_bytes(b"GET / HTTP/1.1\r\n\r\n".to_vec()).await;
    assert_eq!(text_of(&bad.recv().await, "code"), "bad_frame");
    bad.send(&Value::Array(vec![int(1), int(2)])).await;
    assert_eq!(text_of(&bad.recv().await, "code"), "bad_frame");
    // An unknown type keeps its req.
    bad.send(&map(vec![("type", text("launch")), ("req", int(9))]))
        .await;
    let r = bad.recv().await;
    assert_eq!(
        (text_of(&r, "code"), field(&r, "req")),
        ("unknown_type", Some(&int(9)))
    );
    // Wrong field types.
    bad.send(&map(vec![
        ("type", text("status")),
        ("req", int(10)),
        ("id", int(3)),
    ]))
    .await;
    assert_eq!(text_of(&bad.recv().await, "code"), "invalid");
    bad.send(&map(vec![
        ("type", text("submit")),
        ("req", int(11)),
        (
            "job",
            map(vec![("kind", text("k")), ("args", text("not a map"))]),
        ),
    ]))
    .await;
    assert_eq!(text_of(&bad.recv().await, "code"), "invalid");
    bad.send(&map(vec![
        ("type", text("submit")),
        ("req", int(12)),
        ("job", map(vec![("kind", text("bad kind!"))])),
    ]))
    .await;
    assert_eq!(text_of(&bad.recv().await, "code"), "invalid");
    // Oversized: 3 MiB.
    let big = map(vec![
        ("type", text("submit")),
        ("req", int(13)),
        (
            "job",
            map(vec![
                ("kind", text("k")),
                ("args", map(vec![("blob", text(&"x".repeat(3 << 20)))])),
            ]),
        ),
    ]);
    bad.send(&big).await;
    assert_eq!(text_of(&bad.recv().await, "code"), "too_large");
    // Unknown job.
    bad.send(&map(vec![
        ("type", text("status")),
        ("req", int(14)),
        ("id", text(&uuid::Uuid::now_v7().to_string())),
    ]))
    .await;
    assert_eq!(text_of(&bad.recv().await, "code"), "not_found");
    // An unsupported protocol version.
    bad.send(&map(vec![
        ("type", text("hello")),
        ("req", int(15)),
        ("version", int(99)),
        ("role", text("client")),
        ("token", text(TOKEN)),
    ]))
    .await;
    assert_eq!(text_of(&bad.recv().await, "code"), "invalid");
    // Still served after all that.
    bad.send(&map(vec![("type", text("heartbeat")), ("req", int(16))]))
        .await;
    assert_eq!(text_of(&bad.recv().await, "type"), "heartbeat_ack");

    let ids = good.await??;
    assert_eq!(ids.len(), 200);
    let stats = db.queue_stats("default").await?;
    assert_eq!(stats.available + stats.scheduled, 200);
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn a_rust_client_with_a_wrong_token_gets_a_clear_error() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let url = format!("{}?token=wrong", server.endpoint());
    let err = hopper::connect(&url, Default::default())
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("unauthorized"), "{err}");
    server.shutdown().await;
    Ok(())
}

/// An `outcomes` frame of about 1.7 MB (25,000 items), its `req` last (as the Node client
/// writes its maps).
fn big_outcomes(req: i64) -> Value {
    let item = map(vec![
        ("outcome", text("completed")),
        ("id", text(&uuid::Uuid::now_v7().to_string())),
        ("attempt", int(1)),
    ]);
    map(vec![
        ("type", text("outcomes")),
        ("outcomes", Value::Array(vec![item; 25_000])),
        ("req", int(req)),
    ])
}

/// A peer that never said hello is refused at the cost of a pass over each frame's bytes,
/// never of decoding it: its large frames are answered `unauthorized`, with their `req`,
/// and another peer is answered meanwhile as at any time. Decoded whole, 100 such frames
/// held the server's one loop for over half a minute (a debug build), every peer waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_frames_before_hello_are_refused_unread() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let mut good = RawPeer::connect(server.endpoint()).await;
    let r = good.hello("client", TOKEN, vec![]).await;
    assert_eq!(text_of(&r, "type"), "welcome", "{r:?}");

    let mut bad = RawPeer::connect(server.endpoint()).await;
    let frame = {
        let mut out = Vec::new();
        ciborium::into_writer(&big_outcomes(7), &mut out)?;
        out
    };
    assert!(frame.len() > 1_500_000 && frame.len() < 2 * 1024 * 1024);
    for _ in 0..100 {
        bad.send_bytes(frame.clone()).await;
    }
    let status = map(vec![
        ("type", text("status")),
        ("req", int(2)),
        ("id", text(&uuid::Uuid::now_v7().to_string())),
    ]);
    good.send(&status).await;
    let r = good.recv().await;
    assert_eq!(text_of(&r, "code"), "not_found", "{r:?}");
    for _ in 0..100 {
        let r = bad.recv().await;
        assert_eq!(text_of(&r, "code"), "unauthorized", "{r:?}");
        assert_eq!(field(&r, "req"), Some(&int(7)), "{r:?}");
    }

    // A hello that large is refused as such, and gives no session.
    let name = "n".repeat(300 * 1024);
    let r = bad
        .hello("client", TOKEN, vec![("name", text(&name))])
        .await;
    assert_eq!(text_of(&r, "code"), "invalid", "{r:?}");
    assert!(
        text_of(&r, "message").starts_with("hello: a hello frame is at most 262144 bytes"),
        "{r:?}"
    );
    bad.send(&big_outcomes(8)).await;
    assert_eq!(text_of(&bad.recv().await, "code"), "unauthorized");
    // Broken past its envelope's bound: refused without a req.
    let mut broken = frame[..frame.len() - 1].to_vec();
    broken.truncate(400 * 1024);
    bad.send_bytes(broken).await;
    let r = bad.recv().await;
    assert_eq!(text_of(&r, "code"), "bad_frame", "{r:?}");
    assert_eq!(field(&r, "req"), Some(&Value::Null), "{r:?}");
    server.shutdown().await;
    Ok(())
}

/// Of a peer without a session, no frame but a `hello` is decoded, however small: a
/// request whose fields would be refused as `invalid` once decoded is answered
/// `unauthorized`, so a peer that never said hello learns nothing of the fields and costs
/// the loop no decoding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_requests_before_hello_are_refused_undecoded() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let mut bad = RawPeer::connect(server.endpoint()).await;
    // A job's id that is not a UUID: `invalid` once decoded.
    let status = map(vec![
        ("type", text("status")),
        ("req", int(3)),
        ("id", text("not a uuid")),
    ]);
    bad.send(&status).await;
    let r = bad.recv().await;
    assert_eq!(text_of(&r, "code"), "unauthorized", "{r:?}");
    assert_eq!(field(&r, "req"), Some(&int(3)), "{r:?}");
    server.shutdown().await;
    Ok(())
}
