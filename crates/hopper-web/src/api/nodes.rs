//! `/api/v1/nodes`: the registered nodes (runtimes and `hopper serve` processes), what
//! each serves and when it last beat, one page at a time by name, paged as the job
//! listing is (`limit`, `before`, `next_before`).
//!
//! The page is cut here, not in the backend: the nodes table holds a row per running
//! process, has no index on names, and is read whole either way; what paging bounds is
//! the answer (and the dashboard's table). The cursor carries the last node's name and id,
//! so the next page starts after it even when that node has deregistered meanwhile.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hopper::core::NodeRecord;
use hopper::core::lease::NodeId;
use hopper::core::log_limit::capped;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::input::page_limit;
use crate::WebState;
use crate::error::ApiError;

/// The query string of `GET /api/v1/nodes`, as text so each field's error is ours.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NodesQuery {
    before: Option<String>,
    limit: Option<String>,
}

/// The body of `GET /api/v1/nodes`: a page of nodes, by name (then id).
#[derive(Debug, Serialize)]
pub(crate) struct NodePage {
    nodes: Vec<NodeRecord>,
    /// The `before` cursor of the next page, or `null` on the last page.
    next_before: Option<String>,
}

/// `GET /api/v1/nodes`: the registered nodes by name, `limit` at a time (501 on a backend
/// that keeps no statistics).
pub(crate) async fn list(
    State(state): State<WebState>,
    query: Result<Query<NodesQuery>, QueryRejection>,
) -> Result<Json<NodePage>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let limit = page_limit(query.limit)? as usize;
    let after = query
        .before
        .filter(|s| !s.trim().is_empty())
        .map(|cursor| decode(&cursor))
        .transpose()?;
    let mut nodes = state.client().nodes().await?;
    // In Rust's order (bytes of the name, then the id), whatever the database's collation,
    // so that the cursor compares as the listing is sorted.
    nodes.sort_by(|a, b| key(a).cmp(&key(b)));
    let start = after.as_ref().map_or(0, |(name, id)| {
        nodes.partition_point(|n| key(n) <= (name.as_str(), *id))
    });
    // One more than asked: whether it comes says if there is a next page.
    let mut page: Vec<NodeRecord> = nodes.into_iter().skip(start).take(limit + 1).collect();
    let next_before = if page.len() > limit {
        page.truncate(limit);
        page.last().map(encode)
    } else {
        None
    };
    Ok(Json(NodePage {
        nodes: page,
        next_before,
    }))
}

/// Where a node stands in the listing.
fn key(node: &NodeRecord) -> (&str, NodeId) {
    (&node.info.name, node.info.id)
}

/// The cursor after `node`: its id and name, in URL-safe base64.
fn encode(node: &NodeRecord) -> String {
    let mut bytes = node.info.id.as_bytes().to_vec();
    bytes.extend_from_slice(node.info.name.as_bytes());
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The name and id of a cursor made by [`encode`].
fn decode(cursor: &str) -> Result<(String, NodeId), ApiError> {
    let refused = || {
        ApiError::bad_request(format!(
            "before: {} is not a cursor of the node listing (pass the previous page's \
             next_before)",
            capped(cursor)
        ))
    };
    let bytes = URL_SAFE_NO_PAD
        .decode(cursor.trim())
        .map_err(|_| refused())?;
    let (id, name) = bytes.split_at_checked(16).ok_or_else(refused)?;
    let id = Uuid::from_slice(id).map_err(|_| refused())?;
    let name = String::from_utf8(name.to_vec()).map_err(|_| refused())?;
    Ok((name, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> NodeRecord {
        let now = chrono::Utc::now();
        NodeRecord {
            info: hopper::core::NodeInfo {
                id: Uuid::now_v7(),
                name: name.to_owned(),
                queues: Vec::new(),
                concurrency: 1,
            },
            started_at: now,
            heartbeat_at: now,
        }
    }

    #[test]
    fn a_cursor_gives_back_the_name_and_id_it_was_made_of() {
        for name in ["", "web-1", "hopper serve tcp://[::1]:7010", "é\u{0}é"] {
            let node = node(name);
            let cursor = encode(&node);
            assert!(
                cursor
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                "{cursor}"
            );
            assert_eq!(decode(&cursor).ok(), Some((name.to_owned(), node.info.id)));
        }
    }

    #[test]
    fn anything_else_is_refused_as_a_cursor() {
        let short = URL_SAFE_NO_PAD.encode([7u8; 15]);
        let not_utf8 = URL_SAFE_NO_PAD.encode([[0u8; 16].as_slice(), &[0xff]].concat());
        for cursor in ["not base64!", "abc", short.as_str(), not_utf8.as_str()] {
            let refused = decode(cursor).expect_err(cursor);
            assert!(refused.message().contains("next_before"), "{cursor}");
        }
    }
}
