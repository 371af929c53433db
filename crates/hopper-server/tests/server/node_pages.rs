//! `list_nodes` through the server: a page at a time, as `list_jobs` pages (limit 1 to
//! 1,000, default 20), the `next_before` of a reply the `before` of the next request; a
//! request without paging fields (a peer that predates them) gets the first page and the
//! cursor to go on; bad limits and cursors are refused, naming them, and the session goes
//! on.

use std::time::Duration;

use crate::common::*;
use ciborium::Value;
use hopper::testing::TestDatabase;
use hopper::{Client, NodeListParams, NodePage};

/// `n` node names: `node-00`, `node-01`, …
fn names(n: usize) -> impl Iterator<Item = String> {
    (0..n).map(|i| format!("node-{i:02}"))
}

/// Every node `client` lists, walking pages of `limit`, and how many pages it took.
async fn walk(client: &Client, limit: u32) -> anyhow::Result<(Vec<String>, usize)> {
    let mut params = NodeListParams::first(limit);
    let (mut ids, mut pages) = (Vec::new(), 0);
    loop {
        let page: NodePage = client.nodes(&params).await?;
        assert!(page.nodes.len() <= limit as usize);
        ids.extend(page.nodes.iter().map(|n| n.info.id.to_string()));
        pages += 1;
        match page.next_before {
            Some(next) => params.before = Some(next),
            None => return Ok((ids, pages)),
        }
    }
}

/// The ids of a `nodes` reply, and its `next_before` (`None` when null).
fn page_of(reply: &Value) -> (Vec<String>, Option<String>) {
    assert_eq!(text_of(reply, "type"), "nodes", "{reply:?}");
    let ids = field(reply, "nodes")
        .and_then(Value::as_array)
        .expect("nodes")
        .iter()
        .map(|n| text_of(n, "id").to_owned())
        .collect();
    let next = match field(reply, "next_before") {
        Some(Value::Text(cursor)) => Some(cursor.clone()),
        Some(Value::Null) => None,
        other => panic!("next_before: {other:?}"),
    };
    (ids, next)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_nodes_pages_as_list_jobs_and_a_bare_request_gets_the_first_page() -> anyhow::Result<()>
{
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    // 25 nodes, and the server's own: 26.
    db.register_nodes(names(25)).await?;
    let remote = Client::new(hopper::connect(&url(server.endpoint()), Default::default()).await?);
    let direct = Client::new(db.backend());

    // Through the server, pages of 7 walk the same nodes in the same order as the database
    // does, each once.
    let (through, pages) = walk(&remote, 7).await?;
    assert_eq!((through.len(), pages), (26, 4));
    assert_eq!(walk(&direct, 7).await?, (through.clone(), 4));
    assert_eq!(walk(&remote, 1000).await?, (through.clone(), 1));

    // A request as a peer that predates paging sends it: the first 20, and a cursor.
    let mut peer = RawPeer::connect(server.endpoint()).await;
    peer.hello("client", TOKEN, vec![]).await;
    peer.send(&map(vec![("type", text("list_nodes")), ("req", int(2))]))
        .await;
    let (first, next) = page_of(&peer.recv_type("nodes").await);
    assert_eq!(first, through[..20]);
    let next = next.expect("a cursor to go on");
    peer.send(&map(vec![
        ("type", text("list_nodes")),
        ("req", int(3)),
        ("before", text(&next)),
    ]))
    .await;
    let (rest, end) = page_of(&peer.recv_type("nodes").await);
    assert_eq!(rest, through[20..]);
    assert_eq!(end, None, "the last page");
    server.shutdown().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_limits_and_cursors_of_list_nodes_are_refused_by_name() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    db.register_nodes(names(3)).await?;
    let mut peer = RawPeer::connect(server.endpoint()).await;
    peer.hello("client", TOKEN, vec![]).await;

    let job_id = uuid::Uuid::now_v7().to_string();
    let huge = Value::Integer(u64::MAX.into());
    // Base64 but for its last character: the whole is not a cursor.
    let long = "A".repeat(100_000) + "!";
    for (field_name, value, expected) in [
        ("limit", int(0), "limit must be from 1 to 1000, got 0"),
        ("limit", int(1001), "limit must be from 1 to 1000, got 1001"),
        ("limit", int(-1), "limit"),
        ("limit", huge, "limit"),
        ("limit", text("20"), "limit"),
        ("before", text("zzz"), "before: \"zzz\" is not a cursor"),
        ("before", text(""), "is not a cursor of the node listing"),
        (
            "before",
            text(&job_id),
            "is not a cursor of the node listing",
        ),
        ("before", text(&long), "is not a cursor of the node listing"),
        ("before", int(42), "before"),
    ] {
        peer.send(&map(vec![
            ("type", text("list_nodes")),
            ("req", int(5)),
            (field_name, value.clone()),
        ]))
        .await;
        let refused = peer.recv().await;
        let message = text_of(&refused, "message");
        assert_eq!(
            text_of(&refused, "type"),
            "error",
            "{field_name}: {message}"
        );
        assert_eq!(
            text_of(&refused, "code"),
            "invalid",
            "{field_name}: {message}"
        );
        assert!(message.contains(expected), "{field_name}: {message}");
        assert!(message.len() < 1_000, "{field_name}: the value is cut");
    }
    // The session goes on, and every node is still there.
    peer.send(&map(vec![("type", text("list_nodes")), ("req", int(6))]))
        .await;
    assert_eq!(page_of(&peer.recv_type("nodes").await).0.len(), 4);

    // The Rust client over the server is refused as plainly.
    let remote = Client::new(hopper::connect(&url(server.endpoint()), Default::default()).await?);
    for limit in [0, 1001] {
        let refused = remote.nodes(&NodeListParams::first(limit)).await;
        assert!(
            matches!(&refused, Err(hopper::Error::InvalidInput(m)) if m.contains("1 to 1000")),
            "{limit}: {refused:?}"
        );
    }
    server.shutdown().await;
    Ok(())
}
