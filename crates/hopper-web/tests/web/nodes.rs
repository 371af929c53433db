//! `/api/v1/nodes`: the registered nodes, a page at a time by name.

use axum::http::StatusCode;
use hopper::backend::{NodeDeregisterParams, NodeInfo};
use serde_json::{Value, json};

use crate::common::{Web, assert_refused};

/// The names and ids of a page, and its cursor.
fn page(answer: &Value) -> (Vec<(String, String)>, Option<String>) {
    let nodes = answer["nodes"].as_array().cloned().unwrap_or_default();
    let nodes = nodes
        .iter()
        .map(|n| {
            let text = |field: &str| n[field].as_str().unwrap_or_default().to_owned();
            (text("name"), text("id"))
        })
        .collect();
    (nodes, answer["next_before"].as_str().map(str::to_owned))
}

/// `GET /api/v1/nodes`: every registered node with its queues, concurrency and last
/// heartbeat, by name; a deregistered one is gone.
#[tokio::test]
async fn nodes_are_listed_with_their_queues_and_last_heartbeat() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let answer = web.get("/api/v1/nodes").await?;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json, json!({"nodes": [], "next_before": null}));

    let node = NodeInfo {
        id: uuid::Uuid::now_v7(),
        name: "web-7".to_owned(),
        queues: vec!["mail".to_owned(), "pdf".to_owned()],
        concurrency: 12,
    };
    web.backend().node_heartbeat(&node).await?;
    let answer = web.get("/api/v1/nodes").await?;
    assert_eq!(answer.status, StatusCode::OK);
    let nodes = answer.json["nodes"].as_array().cloned().unwrap_or_default();
    assert_eq!(nodes.len(), 1, "{}", answer.json);
    assert_eq!(nodes[0]["id"], node.id.to_string());
    assert_eq!(nodes[0]["name"], "web-7");
    assert_eq!(nodes[0]["queues"], json!(["mail", "pdf"]));
    assert_eq!(nodes[0]["concurrency"], 12);
    for time in ["started_at", "heartbeat_at"] {
        let text = nodes[0][time].as_str().unwrap_or_default();
        assert!(
            chrono::DateTime::parse_from_rfc3339(text).is_ok(),
            "{time}: {text}"
        );
    }

    let gone = NodeDeregisterParams { node: node.id };
    web.backend().node_deregister(&gone).await?;
    assert_eq!(
        web.get("/api/v1/nodes").await?.json,
        json!({"nodes": [], "next_before": null})
    );
    Ok(())
}

/// Pages of `limit` walk every node once, by name (bytes, so `B` before `a` whatever the
/// database's collation) and then id for nodes of one name; a page goes on after its
/// cursor's node even when that node deregistered meanwhile.
#[tokio::test]
async fn pages_walk_every_node_by_name_without_repeats() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let names = [
        "web-3", "B-node", "a-node", "twin", "twin", "web-10", "Ω", "twin",
    ];
    let mut expected: Vec<(String, String)> = web
        .db
        .register_nodes(names)
        .await?
        .into_iter()
        .map(|node| (node.name, node.id.to_string()))
        .collect();
    expected.sort();

    let mut walked = Vec::new();
    let mut uri = "/api/v1/nodes?limit=3".to_owned();
    loop {
        let answer = web.get(&uri).await?;
        assert_eq!(answer.status, StatusCode::OK, "{uri}: {answer:?}");
        let (nodes, next) = page(&answer.json);
        assert!(nodes.len() <= 3, "{}", answer.json);
        walked.extend(nodes);
        match next {
            Some(cursor) => uri = format!("/api/v1/nodes?limit=3&before={cursor}"),
            None => break,
        }
    }
    assert_eq!(walked, expected);

    // The first page's last node leaves: the second page is the same.
    let first = web.get("/api/v1/nodes?limit=3").await?.json;
    let (nodes, cursor) = page(&first);
    let cursor = cursor.expect("a second page");
    let second = format!("/api/v1/nodes?limit=3&before={cursor}");
    let before = web.get(&second).await?.json;
    let last = uuid::Uuid::parse_str(&nodes[2].1)?;
    let gone = NodeDeregisterParams { node: last };
    web.backend().node_deregister(&gone).await?;
    assert_eq!(page(&web.get(&second).await?.json), page(&before));
    assert_eq!(page(&before).0, expected[3..6]);
    Ok(())
}

/// A page holds 50 nodes unless told (the job listing's default), at most 500; the limit
/// and the cursor are checked and named when refused.
#[tokio::test]
async fn the_page_size_is_bounded_and_bad_cursors_are_named() -> anyhow::Result<()> {
    let web = Web::new().await?;
    web.db
        .register_nodes((0..51).map(|n| format!("node-{n:02}")))
        .await?;
    let (nodes, next) = page(&web.get("/api/v1/nodes").await?.json);
    assert_eq!(nodes.len(), 50);
    let next = next.expect("a second page");
    let (rest, end) = page(&web.get(&format!("/api/v1/nodes?before={next}")).await?.json);
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].0, "node-50");
    assert_eq!(end, None);
    for limit in ["500", "51", ""] {
        let answer = web.get(&format!("/api/v1/nodes?limit={limit}")).await?;
        let (nodes, next) = page(&answer.json);
        let whole = !limit.is_empty();
        assert_eq!(nodes.len(), if whole { 51 } else { 50 }, "limit={limit}");
        assert_eq!(next.is_none(), whole, "limit={limit}");
    }

    for (query, expected) in [
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("limit=ten", "limit"),
        ("before=zzz", "before"),
        ("before=not%20base64", "before"),
        ("before=AAAAAAAAAAAAAAAAAAAAAP8", "before"),
        ("colour=blue", "colour"),
    ] {
        assert_refused(&web, &format!("/api/v1/nodes?{query}"), expected).await?;
    }
    Ok(())
}
