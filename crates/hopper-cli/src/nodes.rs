//! `hopper nodes`: the registered nodes (runtimes and `hopper serve` processes), the queues
//! each serves, its concurrency and how long ago it last beat. A node silent past its
//! `node_dead_after` is released by the others and disappears from the list.

use std::sync::Arc;

use chrono::{SecondsFormat, Utc};
use hopper::Client;
use hopper::backend::Backend;
use serde::Serialize;

use crate::admin::{print_json, print_table};
use crate::output::outln;

/// Prints the nodes: a table, or `{"nodes": [...]}` under `--json`.
pub async fn nodes(backend: &Arc<dyn Backend>, json: bool) -> anyhow::Result<()> {
    let nodes = Client::new(backend.clone()).nodes().await?;
    if json {
        #[derive(Serialize)]
        struct Nodes<'a> {
            nodes: &'a [hopper::core::NodeRecord],
        }
        return print_json(&Nodes { nodes: &nodes });
    }
    if nodes.is_empty() {
        outln!("no nodes");
        return Ok(());
    }
    let now = Utc::now();
    let rows = nodes
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
    )
}
