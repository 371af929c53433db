//! `/api/v1/nodes`: the registered nodes (runtimes and `hopper serve` processes), what
//! each serves and when it last beat, one page at a time by name, paged as the job
//! listing is (`limit`, `before`, `next_before`). The order, the cursor and the cut are
//! the listing's everywhere ([`hopper::core::node_list`]); the bounds of `limit` are this
//! API's, those of its job listing.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use hopper::{NodeCursor, NodeListParams, NodePage};
use serde::Deserialize;

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

/// `GET /api/v1/nodes`: the registered nodes by name, `limit` at a time, and the
/// `next_before` cursor of the next page (`null` on the last); 501 on a backend that keeps
/// no statistics.
pub(crate) async fn list(
    State(state): State<WebState>,
    query: Result<Query<NodesQuery>, QueryRejection>,
) -> Result<Json<NodePage>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let params = NodeListParams {
        limit: page_limit(query.limit)?,
        before: query
            .before
            .filter(|s| !s.trim().is_empty())
            .map(|cursor| NodeCursor::parse("before", &cursor))
            .transpose()?,
    };
    Ok(Json(state.client().nodes(&params).await?))
}
