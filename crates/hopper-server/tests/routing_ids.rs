//! Peers that claim the routing ids libzmq would give the next peers that choose none do not
//! abort the server. libzmq numbers those peers from `rand()` and never checks the number
//! against ids peers chose, aborting on a clash; unseeded, the first ROUTER of a process
//! always started at `0x006b8b4567`.
//!
//! A test binary of its own: which numbers libzmq hands out depends on the ROUTERs created
//! before in the process, so this test must create the first.

mod common;

use std::time::Duration;

use common::*;
use hopper::testing::TestDatabase;

/// Where an unseeded `rand()` started the anonymous peers' counter.
const UNSEEDED_START: u32 = 0x6b8b_4567;

/// Connects a DEALER with routing id `id`, sends one undecodable byte and waits for the
/// refusal: once it has come, the server knows the peer by that id.
fn claim(context: &zmq::Context, endpoint: &str, id: &[u8]) -> anyhow::Result<zmq::Socket> {
    let socket = context.socket(zmq::DEALER)?;
    socket.set_linger(0)?;
    socket.set_rcvtimeo(10_000)?;
    socket.set_identity(id)?;
    socket.connect(endpoint)?;
    socket.send(vec![0xffu8], 0)?;
    socket.recv_bytes(0)?;
    Ok(socket)
}

#[tokio::test]
async fn peers_claiming_the_next_anonymous_routing_ids_do_not_abort_the_server()
-> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let endpoint = server.endpoint().to_owned();
    let claimers = tokio::task::spawn_blocking({
        let endpoint = endpoint.clone();
        move || {
            let context = zmq::Context::new();
            let mut sockets = Vec::new();
            for k in 0..200u32 {
                let mut id = vec![0u8];
                id.extend(UNSEEDED_START.wrapping_add(k).to_be_bytes());
                sockets.push(claim(&context, &endpoint, &id)?);
            }
            anyhow::Ok((context, sockets))
        }
    })
    .await??;

    // 201 peers that choose no id: before the seed, the first of them aborted the process.
    let mut anonymous = Vec::new();
    for _ in 0..201 {
        let mut peer = RawPeer::connect(&endpoint).await;
        peer.send_bytes(vec![0xff]).await;
        assert_eq!(text_of(&peer.recv().await, "code"), "bad_frame");
        anonymous.push(peer);
    }
    let client = hopper::Client::new(hopper::connect(&url(&endpoint), Default::default()).await?);
    let id = client
        .insert(hopper::NewJob::new("after", serde_json::json!({})))
        .await?;
    assert!(client.job(id).await?.is_some());
    drop(claimers);
    server.shutdown().await;
    Ok(())
}
