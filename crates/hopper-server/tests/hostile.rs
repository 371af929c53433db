//! Hostile peers cost little: idle TCP connections end after the handshake deadline while a
//! well-behaved client is served at its usual pace, the connection cap refuses newcomers
//! with one log line, and a flood of bad hellos leaves others served.
//!
//! Every test of this binary logs into one capture (a global subscriber). A binary of its
//! own, apart from `tests/server`: it counts log lines any server of the process could
//! write.

mod common;

use std::time::{Duration, Instant};

use common::*;
use hopper::testing::TestDatabase;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The slowest of `n` submit-and-status round trips through `client`.
async fn slowest_round_trip(client: &hopper::Client, n: usize) -> anyhow::Result<Duration> {
    let mut slowest = Duration::ZERO;
    for i in 0..n {
        let started = Instant::now();
        let id = client
            .insert(hopper::NewJob::new("polite", serde_json::json!({ "n": i })))
            .await?;
        anyhow::ensure!(client.job(id).await?.is_some(), "the job exists");
        slowest = slowest.max(started.elapsed());
    }
    Ok(slowest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_end_at_the_handshake_deadline_and_cost_others_nothing()
-> anyhow::Result<()> {
    const IDLE: usize = 1_000;
    logs();
    let db = TestDatabase::new().await?;
    let mut config = config(&db, Duration::from_secs(5)).await;
    config.handshake_timeout = Duration::from_secs(2);
    let server = start(config).await;
    let endpoint = server.endpoint().to_owned();
    let client = hopper::Client::new(hopper::connect(&url(&endpoint), Default::default()).await?);
    let before = slowest_round_trip(&client, 20).await?;

    let address = endpoint.trim_start_matches("tcp://").to_owned();
    let mut idle = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        idle.push(TcpStream::connect(&address).await?);
    }
    let opened = Instant::now();
    let during = slowest_round_trip(&client, 20).await?;
    assert!(
        during < Duration::from_millis(500).max(before * 5),
        "{IDLE} idle connections slowed a polite client from {before:?} to {during:?}"
    );

    // The server closes every one of them at the deadline: each read reaches the end.
    let mut closed = 0;
    for mut stream in idle {
        let mut sink = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(15), stream.read_to_end(&mut sink));
        if matches!(read.await, Ok(Ok(_))) {
            closed += 1;
        }
    }
    assert_eq!(closed, IDLE, "idle connections closed by the server");
    assert!(
        opened.elapsed() < Duration::from_secs(15),
        "closed within the deadline and some slack"
    );
    assert!(
        lines_with("before completing its handshake").len() <= 3,
        "idle connections are logged once per period, not one line each"
    );
    assert!(slowest_round_trip(&client, 5).await? < Duration::from_secs(1));
    server.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_cap_newcomers_are_refused_with_one_log_line() -> anyhow::Result<()> {
    logs();
    let db = TestDatabase::new().await?;
    let mut config = config(&db, Duration::from_secs(5)).await;
    config.max_connections = 5;
    let server = start(config).await;
    let endpoint = server.endpoint().to_owned();
    let address = endpoint.trim_start_matches("tcp://").to_owned();
    let mut hogs = Vec::new();
    for _ in 0..8 {
        hogs.push(TcpStream::connect(&address).await?);
    }
    // The monitor counts them as they are accepted: give it until a newcomer is refused.
    let mut refused = 0;
    for _ in 0..5 {
        let mut newcomer = RawPeer::connect(&endpoint).await;
        newcomer.set_timeout(Duration::from_millis(500));
        let mut bye = Vec::new();
        ciborium::into_writer(&map(vec![("type", text("bye")), ("req", int(1))]), &mut bye)?;
        // Refused: the send finds no connection up (the server closed it at once), or the
        // message goes and nothing answers.
        if !newcomer.try_send_bytes(bye) || newcomer.try_recv_bytes().await.is_none() {
            refused += 1;
        }
    }
    assert!(
        refused >= 4,
        "newcomers past the cap are refused ({refused} of 5)"
    );
    assert_eq!(
        lines_with("connection cap reached").len(),
        1,
        "the cap is logged once"
    );
    drop(hogs);
    // Below the cap again, a newcomer is served.
    let client = hopper::connect(&url(&endpoint), Default::default()).await?;
    hopper::Client::new(client)
        .insert(hopper::NewJob::new("after", serde_json::json!({})))
        .await?;
    server.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_bad_hellos_leaves_others_served() -> anyhow::Result<()> {
    logs();
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let endpoint = server.endpoint().to_owned();
    let client = hopper::Client::new(hopper::connect(&url(&endpoint), Default::default()).await?);
    let mut flooders = Vec::new();
    for _ in 0..4 {
        flooders.push(RawPeer::connect(&endpoint).await);
    }
    let name = "n".repeat(16 << 10);
    for i in 0..500 {
        let hello = map(vec![
            ("type", text("hello")),
            ("req", int(i)),
            ("version", int(1)),
            ("role", text("worker")),
            ("token", text("wrong-token-0123456789")),
            ("name", text(&name)),
        ]);
        let peer = &mut flooders[usize::try_from(i).unwrap_or(0) % 4];
        peer.send(&hello).await;
    }
    let slowest = slowest_round_trip(&client, 10).await?;
    assert!(
        slowest < Duration::from_secs(2),
        "a polite client waited {slowest:?} during a flood"
    );
    assert_eq!(db.queue_stats("default").await?.available, 10);
    server.shutdown().await;
    Ok(())
}

/// Frames that do not decode, sent before any hello as fast as a peer can: answered each,
/// logged once per interval (the rest counted), and what the peer sent shows cut short in
/// the line, however long it was.
#[tokio::test]
async fn a_flood_of_undecodable_frames_costs_one_short_log_line() -> anyhow::Result<()> {
    logs();
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let endpoint = server.endpoint().to_owned();
    let mut flooder = RawPeer::connect(&endpoint).await;
    let tag = format!("flood-{}", uuid::Uuid::now_v7().simple());
    let huge = format!("{tag}{}", "Z".repeat(1 << 20));
    let frame = |ty: &str, req: i64| map(vec![("type", text(ty)), ("req", int(req))]);
    flooder.send(&frame(&huge, 0)).await;
    assert_eq!(text_of(&flooder.recv().await, "code"), "unknown_type");
    for req in 1..=200 {
        flooder.send(&frame(&tag, req)).await;
        flooder.send_bytes(vec![0xff]).await;
    }
    for _ in 0..400 {
        let reply = flooder.recv().await;
        assert_eq!(text_of(&reply, "type"), "error", "{reply:?}");
    }

    let lines = lines_with("refused a frame");
    assert_eq!(
        lines.len(),
        1,
        "one line for 401 refused frames: {lines:#?}"
    );
    assert!(lines[0].contains(&tag), "{:?}", lines[0]);
    assert!(
        lines[0].len() < 1_000,
        "a 1 MiB type was logged at {} bytes",
        lines[0].len()
    );
    server.shutdown().await;
    Ok(())
}
