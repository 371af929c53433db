//! The listing of the registered nodes, a page at a time: its order, its cursor and how a
//! page is cut, the same through every door (`Client::nodes`, `hopper nodes`,
//! `GET /api/v1/nodes`, the ZeroMQ `list_nodes` and the clients built on it). Each door
//! keeps only its own bounds of `limit`, those of its job listing.
//!
//! The nodes table holds a row per running process and has no index on names: a backend
//! reads it whole ([`crate::backend::StatsStore::node_list`]) and [`page`] cuts the page.
//! What paging bounds is the answer, not the reading: a reply holds at most `limit` nodes
//! however many are registered (each door bounds `limit` as it bounds its job listing's),
//! and one table of the dashboard stays short.
//!
//! Nodes are ordered by the bytes of their names, then by id, whatever the database's
//! collation, so that the cursor (the last node's name and id, [`NodeCursor`]) compares as
//! the listing is sorted: a page goes on after its cursor's node even when that node has
//! deregistered meanwhile, and no node is listed twice.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Serialize, Serializer};
use uuid::Uuid;

use crate::backend::NodeRecord;
use crate::error::{Error, Result};
use crate::lease::NodeId;
use crate::log_limit::capped;

/// Parameters of [`crate::backend::StatsStore::node_list`]: where the page starts and
/// how many nodes it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeListParams {
    /// Only nodes after this one in the listing: the previous page's
    /// [`NodePage::next_before`] (`None`: the first page).
    pub before: Option<NodeCursor>,
    /// At most this many (at least 1).
    pub limit: u32,
}

impl NodeListParams {
    /// The first page, of `limit` nodes.
    pub fn first(limit: u32) -> Self {
        NodeListParams {
            before: None,
            limit,
        }
    }

    /// [`Error::InvalidInput`] for a `limit` of 0, checked by a backend before it reads.
    pub fn check(&self) -> Result<()> {
        if self.limit == 0 {
            return Err(Error::InvalidInput(
                "limit must be at least 1, got 0".to_owned(),
            ));
        }
        Ok(())
    }
}

/// One page of the registered nodes, in listing order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodePage {
    /// The nodes, by name (bytes), then id.
    pub nodes: Vec<NodeRecord>,
    /// The cursor of the next page (its [`NodeListParams::before`]), or `None` on the last
    /// page.
    pub next_before: Option<NodeCursor>,
}

/// Where a page of the listing starts: after the node of this name and id. As text, the
/// id's 16 bytes then the name's, in URL-safe base64 without padding, opaque to callers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCursor {
    name: String,
    id: NodeId,
}

impl NodeCursor {
    /// The cursor of the page that goes on after `node`.
    pub fn after(node: &NodeRecord) -> Self {
        NodeCursor {
            name: node.info.name.clone(),
            id: node.info.id,
        }
    }

    /// The cursor `text` (as `Display` wrote it, blanks around it ignored), given as the
    /// parameter `what` (`before` of a request, `--before` of the command line): anything
    /// else is [`Error::InvalidInput`] naming `what` and saying what to pass instead.
    pub fn parse(what: &str, text: &str) -> Result<Self> {
        let refused = || {
            Error::InvalidInput(format!(
                "{what}: \"{}\" is not a cursor of the node listing (pass the previous \
                 page's next_before)",
                capped(text)
            ))
        };
        let bytes = URL_SAFE_NO_PAD.decode(text.trim()).map_err(|_| refused())?;
        let (id, name) = bytes.split_at_checked(16).ok_or_else(refused)?;
        let id = Uuid::from_slice(id).map_err(|_| refused())?;
        let name = String::from_utf8(name.to_vec()).map_err(|_| refused())?;
        Ok(NodeCursor { name, id })
    }

    /// Whether `node` comes after this cursor in the listing.
    fn precedes(&self, node: &NodeRecord) -> bool {
        (self.name.as_str(), self.id) < key(node)
    }
}

impl fmt::Display for NodeCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut bytes = self.id.as_bytes().to_vec();
        bytes.extend_from_slice(self.name.as_bytes());
        f.write_str(&URL_SAFE_NO_PAD.encode(bytes))
    }
}

impl Serialize for NodeCursor {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Where a node stands in the listing: its name's bytes (Rust's order of `str`), then its id.
fn key(node: &NodeRecord) -> (&str, NodeId) {
    (&node.info.name, node.info.id)
}

/// The page `params` asks for out of every registered node (in any order): the first
/// `params.limit` nodes after `params.before`, in listing order, and the cursor of the
/// next page when more follow. A `limit` of 0 is [`Error::InvalidInput`].
pub fn page(mut nodes: Vec<NodeRecord>, params: &NodeListParams) -> Result<NodePage> {
    params.check()?;
    if let Some(cursor) = &params.before {
        nodes.retain(|n| cursor.precedes(n));
    }
    nodes.sort_unstable_by(|a, b| key(a).cmp(&key(b)));
    let limit = usize::try_from(params.limit).unwrap_or(usize::MAX);
    let next_before = if nodes.len() > limit {
        nodes.truncate(limit);
        nodes.last().map(NodeCursor::after)
    } else {
        None
    };
    Ok(NodePage { nodes, next_before })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::NodeInfo;

    fn node(name: &str) -> NodeRecord {
        let now = chrono::Utc::now();
        NodeRecord {
            info: NodeInfo {
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
    fn a_cursor_gives_back_the_name_and_id_it_was_made_of() -> Result<()> {
        for name in ["", "web-1", "hopper serve tcp://[::1]:7010", "é\u{0}é"] {
            let cursor = NodeCursor::after(&node(name));
            let text = cursor.to_string();
            assert!(
                text.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                "{text}"
            );
            assert_eq!(NodeCursor::parse("before", &text)?, cursor);
            assert_eq!(NodeCursor::parse("before", &format!(" {text}\n"))?, cursor);
            assert_eq!(serde_json::to_value(&cursor)?, serde_json::json!(text));
        }
        Ok(())
    }

    #[test]
    fn anything_else_is_refused_as_a_cursor() {
        let short = URL_SAFE_NO_PAD.encode([7u8; 15]);
        let not_utf8 = URL_SAFE_NO_PAD.encode([[0u8; 16].as_slice(), &[0xff]].concat());
        let long = "A".repeat(100_000) + "!";
        for text in ["", "not base64!", "abc", &short, &not_utf8, &long] {
            match NodeCursor::parse("--before", text) {
                Err(Error::InvalidInput(m)) => {
                    assert!(m.starts_with("--before: "), "{m}");
                    assert!(m.contains("next_before"), "{m}");
                    assert!(m.len() < 1_000, "the cursor is cut: {m}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn pages_walk_every_node_once_in_byte_order_of_names_then_ids() -> Result<()> {
        let names = [
            "web-3", "B-node", "a-node", "twin", "twin", "web-10", "Ω", "twin",
        ];
        let nodes: Vec<NodeRecord> = names.iter().map(|n| node(n)).collect();
        let mut expected: Vec<(String, NodeId)> = nodes
            .iter()
            .map(|n| (n.info.name.clone(), n.info.id))
            .collect();
        expected.sort();
        let mut params = NodeListParams::first(3);
        let mut walked = Vec::new();
        loop {
            let page = page(nodes.clone(), &params)?;
            assert!(page.nodes.len() <= 3);
            walked.extend(page.nodes.iter().map(|n| (n.info.name.clone(), n.info.id)));
            match page.next_before {
                Some(next) => params.before = Some(next),
                None => break,
            }
        }
        assert_eq!(walked, expected);
        assert_eq!(walked[0].0, "B-node", "bytes: B before a");

        // A whole listing in one page has no next page; a page that ends just before the
        // last node has one, and the page after it holds that node alone.
        assert_eq!(
            page(nodes.clone(), &NodeListParams::first(8))?.next_before,
            None
        );
        let seven = page(nodes.clone(), &NodeListParams::first(7))?;
        let rest = page(
            nodes.clone(),
            &NodeListParams {
                before: seven.next_before,
                limit: u32::MAX,
            },
        )?;
        assert_eq!(rest.nodes.len(), 1);
        assert_eq!(rest.next_before, None);
        Ok(())
    }

    #[test]
    fn a_page_goes_on_after_a_node_that_left() -> Result<()> {
        let nodes: Vec<NodeRecord> = ["a", "b", "c", "d"].iter().map(|n| node(n)).collect();
        let first = page(nodes.clone(), &NodeListParams::first(2))?;
        let next = NodeListParams {
            before: first.next_before.clone(),
            limit: 2,
        };
        let without_b: Vec<NodeRecord> = nodes
            .iter()
            .filter(|n| n.info.name != "b")
            .cloned()
            .collect();
        assert_eq!(page(without_b, &next)?, page(nodes, &next)?);
        Ok(())
    }

    #[test]
    fn a_page_of_no_nodes_is_refused() {
        assert!(matches!(
            page(vec![node("a")], &NodeListParams::first(0)),
            Err(Error::InvalidInput(m)) if m.contains("limit")
        ));
    }
}
