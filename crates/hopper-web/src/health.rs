//! `GET /health`: 200 while every supervised background task of the process runs, 503
//! once one gave up (see `hopper::supervise`). Open to anyone, for load balancers and
//! orchestrators; it says only whether the process is healthy and, if not, which task gave
//! up (its name, never its cause: that is in the log).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::WebState;

/// Answers the process's health.
pub(crate) async fn health(State(state): State<WebState>) -> (StatusCode, Json<Value>) {
    match state.inner.health.as_ref() {
        Some(health) if !health.is_healthy() => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "unhealthy", "task": health.failed_task() })),
        ),
        _ => (StatusCode::OK, Json(json!({ "status": "ok" }))),
    }
}
