//! CURVE on the server's one socket: a plaintext peer and a peer that encrypts to a wrong
//! server key get no request through (not a hello, not a submit), and are logged once, not
//! per attempt; a peer with the server's public key is served. Plaintext is refused on an
//! endpoint other hosts can reach unless asked for.
//!
//! A test binary of its own, apart from `tests/server`: it counts log lines any server of
//! the process could write (one capture, a global subscriber).

mod common;

use std::time::Duration;

use common::*;
use hopper::testing::TestDatabase;
use hopper_server::{ServeError, Server, ServerKeys};

/// Sends `value` if a connection is up within the peer's timeout; a refused peer's socket
/// may have none.
fn send_if_up(peer: &mut RawPeer, value: &ciborium::Value) {
    let mut bytes = Vec::new();
    ciborium::into_writer(value, &mut bytes).expect("encodes");
    peer.try_send_bytes(bytes);
}

/// A submit as a raw peer sends it.
fn submit(req: i64) -> ciborium::Value {
    map(vec![
        ("type", text("submit")),
        ("req", int(req)),
        ("job", map(vec![("kind", text("intruder"))])),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_and_wrong_key_peers_get_nothing_through_a_curve_server() -> anyhow::Result<()> {
    logs();
    let db = TestDatabase::new().await?;
    let keys = ServerKeys::generate()?;
    let mut config = config(&db, Duration::from_secs(5)).await;
    config.curve = Some(keys.clone());
    let server = start(config).await;
    let endpoint = server.endpoint().to_owned();
    let wrong = ServerKeys::generate()?.public;

    // Raw peers: a hello with the right token, then a submit; neither is answered. A send
    // may also find no connection to go on (the server dropped the failed handshake and the
    // socket is between reconnects): that too gets nothing in. The twenty peers try at
    // once, each waiting its 500 ms for an answer.
    let tries = [None, Some(wrong.clone())].into_iter().flat_map(|key| {
        let endpoint = endpoint.clone();
        (0..10).map(move |_| {
            let (endpoint, key) = (endpoint.clone(), key.clone());
            tokio::spawn(async move {
                let mut peer = RawPeer::connect_with(&endpoint, key.as_deref()).await;
                peer.set_timeout(Duration::from_millis(500));
                let hello = map(vec![
                    ("type", text("hello")),
                    ("req", int(1)),
                    ("version", int(1)),
                    ("role", text("client")),
                    ("token", text(TOKEN)),
                ]);
                let mut peer = tokio::task::spawn_blocking(move || {
                    send_if_up(&mut peer, &hello);
                    send_if_up(&mut peer, &submit(2));
                    peer
                })
                .await
                .expect("the sending task");
                (key, peer.try_recv_bytes().await)
            })
        })
    });
    for tried in futures_util::future::join_all(tries).await {
        let (key, answer) = tried.expect("a peer's task");
        assert_eq!(answer, None, "key {key:?}: answered");
    }
    assert_eq!(
        db.queue_stats("default").await?.available,
        0,
        "nothing got in"
    );

    // The Rust client says why it cannot get through.
    // Without a key the handshake fails on the server's side, and the client may only see
    // its hello go unanswered: either way it is refused, and says so.
    for (key, says) in [
        (None, &["mismatch", "no welcome"][..]),
        (Some(&wrong), &["server_key"][..]),
    ] {
        let mut options = hopper::RemoteOptions::from_url(&url(&endpoint))?;
        options.server_key = key.cloned();
        options.request_timeout = Duration::from_secs(8);
        let refused = hopper::RemoteBackend::connect(options)
            .await
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            says.iter().any(|s| refused.contains(s)),
            "key {key:?}: {refused:?}"
        );
        assert!(
            !refused.contains("database: database"),
            "a doubled prefix: {refused:?}"
        );
    }

    // The right key is served, raw and through the Rust client.
    let mut good = RawPeer::connect_with(&endpoint, Some(&keys.public)).await;
    let welcome = good.hello("client", TOKEN, vec![]).await;
    assert_eq!(text_of(&welcome, "type"), "welcome", "{welcome:?}");
    let url = format!("{}&server_key={}", url(&endpoint), keys.public);
    let client = hopper::Client::new(hopper::connect(&url, Default::default()).await?);
    let id = client
        .insert(hopper::NewJob::new("fine", serde_json::json!({})))
        .await?;
    assert!(client.job(id).await?.is_some());
    assert_eq!(db.queue_stats("default").await?.available, 1);

    // Twenty refused handshakes of each kind, a few log lines: one per kind per period.
    let mismatch = lines_with("security mechanism mismatch").len();
    let decrypt = lines_with("wrong server key").len();
    assert!(
        (1..=2).contains(&mismatch) && (1..=2).contains(&decrypt),
        "refusals are logged, rate-limited: {mismatch} mismatch and {decrypt} wrong-key lines"
    );
    server.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn plaintext_beyond_loopback_needs_to_be_asked_for() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let mut config = config(&db, Duration::from_secs(5)).await;
    config.listen = "tcp://0.0.0.0:0".to_owned();
    match Server::start(config.clone()).await {
        Err(ServeError::Bind { reason, .. }) => {
            assert!(reason.contains("--insecure-plaintext"), "{reason}");
        }
        other => panic!("plaintext on 0.0.0.0 must be refused, got {other:?}"),
    }
    config.insecure_plaintext = true;
    Server::start(config.clone()).await?.shutdown().await;
    config.insecure_plaintext = false;
    config.curve = Some(ServerKeys::generate()?);
    Server::start(config).await?.shutdown().await;
    Ok(())
}
