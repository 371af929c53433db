//! `hopper nodes`: the registered nodes (runtimes and `hopper serve` processes), the queues
//! each serves, its concurrency and how long ago it last beat, a page at a time by name
//! (`--limit`, `--before`, as `hopper jobs list` takes `--limit`). A node silent past its
//! `node_dead_after` is released by the others and disappears from the list.

use std::sync::Arc;

use chrono::{SecondsFormat, Utc};
use hopper::backend::Backend;
use hopper::{Client, NodeCursor, NodeListParams};

use crate::admin::{print_json, print_table};
use crate::cli::NodesArgs;
use crate::output::outln;

/// The page the flags ask for, refused before anything connects when `--before` is not a
/// cursor a page printed.
pub fn params(args: &NodesArgs) -> anyhow::Result<NodeListParams> {
    let before = args
        .before
        .as_deref()
        .map(|cursor| NodeCursor::parse("--before", cursor))
        .transpose()?;
    Ok(NodeListParams {
        before,
        limit: args.limit,
    })
}

/// Prints a page of nodes: a table and, when more follow, the command that shows the next
/// page; or `{"nodes": [...], "next_before": cursor or null}` under `--json`.
pub async fn nodes(
    backend: &Arc<dyn Backend>,
    params: &NodeListParams,
    json: bool,
) -> anyhow::Result<()> {
    let page = Client::new(backend.clone()).nodes(params).await?;
    if json {
        return print_json(&page);
    }
    if page.nodes.is_empty() {
        outln!("no nodes");
        return Ok(());
    }
    let now = Utc::now();
    let rows = page
        .nodes
        .iter()
        .map(|n| {
            let silent = (now - n.heartbeat_at).to_std().unwrap_or_default();
            vec![
                n.info.name.clone(),
                n.info.id.to_string(),
                n.info.queues.join(","),
                n.info.concurrency.to_string(),
                n.started_at.to_rfc3339_opts(SecondsFormat::Secs, true),
                format!("{:.1}s ago", silent.as_secs_f64()),
            ]
        })
        .collect();
    print_table(
        "",
        &[
            "NAME",
            "ID",
            "QUEUES",
            "CONCURRENCY",
            "STARTED",
            "LAST BEAT",
        ],
        rows,
    )?;
    if let Some(next) = &page.next_before {
        // The cursor is base64url: nothing in it needs quoting or escaping.
        outln!(
            "more nodes: hopper nodes --limit {} --before {next}",
            params.limit
        );
    }
    Ok(())
}
