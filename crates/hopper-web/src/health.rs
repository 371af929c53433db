//! `GET /health`: 200 while every supervised background task of the process runs, 503
//! once one gave up (see `hopper::supervise`). Open to anyone, for load balancers and
//! orchestrators; it says only whether the process is healthy, the cause is in its log.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::WebState;

/// Answers the process's health.
pub(crate) async fn health(State(state): State<WebState>) -> (StatusCode, Json<Value>) {
    match state.inner.health.as_ref().map(hopper::Health::is_healthy) {
        Some(false) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "unhealthy" })),
        ),
        Some(true) | None => (StatusCode::OK, Json(json!({ "status": "ok" }))),
    }
}
