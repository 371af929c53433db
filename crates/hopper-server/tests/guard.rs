//! A frame announcing more than the limit closes that connection before anything is
//! allocated for it (the zeromq crate alone would try to allocate it and abort the
//! process), and the server keeps serving everyone else.

mod common;

use std::time::Duration;

use common::*;
use hopper::testing::TestDatabase;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A ZMTP 3.0 greeting with the NULL mechanism, as a client sends it.
fn greeting() -> Vec<u8> {
    let mut g = vec![0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 3, 0];
    let mut mechanism = b"NULL".to_vec();
    mechanism.resize(20, 0);
    g.extend(mechanism);
    g.push(0); // as-server
    g.resize(64, 0); // filler
    g
}

#[tokio::test]
async fn a_frame_announcing_exabytes_closes_its_connection_only() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let endpoint = server.endpoint().to_owned();
    let address = endpoint.trim_start_matches("tcp://");

    // The 73 bytes that aborted the server: a greeting, then a command frame (LONG)
    // announcing 2^62 bytes.
    let mut evil = TcpStream::connect(address).await?;
    let mut bytes = greeting();
    bytes.push(0x06);
    bytes.extend_from_slice(&(1u64 << 62).to_be_bytes());
    evil.write_all(&bytes).await?;
    // The server side closes: reading reaches the end (after the server's own greeting).
    let mut sink = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), evil.read_to_end(&mut sink)).await;
    assert!(
        matches!(read, Ok(Ok(_))),
        "the connection announcing 2^62 bytes must be closed, got {read:?}"
    );

    // Everyone else is served: a client submits and reads back a job.
    let client = hopper::Client::new(hopper::connect(&url(&endpoint), Default::default()).await?);
    let id = client
        .insert(hopper::NewJob::new("after", serde_json::json!({ "n": 1 })))
        .await?;
    let job = client.job(id).await?;
    assert!(
        job.is_some(),
        "the job submitted after the bad frame exists"
    );
    server.shutdown().await;
    Ok(())
}
