//! `/api/v1/nodes`: the registered nodes (runtimes and `hopper serve` processes), what
//! each serves and when it last beat.

use axum::Json;
use axum::extract::State;
use hopper::core::NodeRecord;
use serde::Serialize;

use crate::WebState;
use crate::error::ApiError;

/// The body of `GET /api/v1/nodes`.
#[derive(Debug, Serialize)]
pub(crate) struct Nodes {
    nodes: Vec<NodeRecord>,
}

/// `GET /api/v1/nodes`: every registered node, by name (501 on a backend that keeps no
/// statistics).
pub(crate) async fn list(State(state): State<WebState>) -> Result<Json<Nodes>, ApiError> {
    let nodes = state.client().nodes().await?;
    Ok(Json(Nodes { nodes }))
}
