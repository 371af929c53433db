//! A frame announcing more than the limit closes that connection before anything is
//! allocated for it (libzmq's `ZMQ_MAXMSGSIZE`), on the server's one listening socket, and
//! the server keeps serving everyone else.
//!
//! A test binary of its own, apart from `tests/server`: it counts the listening sockets of
//! the whole process.

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

    // The server listens on one TCP socket, the one it announced: no inner port to reach.
    let port = address.rsplit(':').next().unwrap_or("").parse::<u16>()?;
    assert_eq!(
        listening_ports()?,
        vec![port],
        "exactly one listening socket"
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

/// The TCP ports this process listens on, from the socket inodes among its descriptors and
/// the kernel's table of TCP sockets (state 0A is LISTEN).
fn listening_ports() -> anyhow::Result<Vec<u16>> {
    let mut inodes = std::collections::HashSet::new();
    for fd in std::fs::read_dir("/proc/self/fd")? {
        let target = std::fs::read_link(fd?.path()).unwrap_or_default();
        let target = target.to_string_lossy();
        if let Some(inode) = target
            .strip_prefix("socket:[")
            .and_then(|t| t.strip_suffix(']'))
        {
            inodes.insert(inode.to_owned());
        }
    }
    let mut ports = Vec::new();
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            if *state == "0A" && inodes.contains(*inode) {
                let port = local.rsplit(':').next().unwrap_or("");
                ports.push(u16::from_str_radix(port, 16)?);
            }
        }
    }
    ports.sort_unstable();
    Ok(ports)
}
