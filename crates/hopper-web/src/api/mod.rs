//! The HTTP JSON API, under `/api/v1`. Endpoints are listed in `openapi.json` (served at
//! `/api/v1/openapi.json`) and explained in `docs/http-api.md`.
//!
//! Handlers parse everything a caller sends themselves, so a bad request is refused with a
//! message naming the field, before anything is written; extraction failures (invalid
//! JSON, a wrong content type, an oversized body) become the same JSON error shape.

mod input;
mod jobs;
mod limits;
mod nodes;
mod object;
mod queues;

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, OriginalUri, Request};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use axum::{Extension, Json, Router};
use hopper::core::json_numbers::check_integers;
use serde::de::DeserializeOwned;
use serde_json::json;
use serde_json::value::RawValue;

use crate::WebState;
use crate::auth::Role;
use crate::error::ApiError;
use object::Object;

/// The OpenAPI 3.1 document, checked in beside the crate's manifest.
pub(crate) const OPENAPI: &str = include_str!("../../openapi.json");

/// Every authenticated API route. (The authentication layer is added by the caller.)
pub(crate) fn routes() -> Router<WebState> {
    Router::new()
        .route("/api/v1/whoami", get(whoami))
        .route("/api/v1/jobs", get(jobs::list).post(jobs::enqueue))
        .route("/api/v1/jobs/batch", post(jobs::enqueue_batch))
        .route("/api/v1/jobs/retry-failed", post(jobs::retry_failed))
        .route("/api/v1/jobs/{id}", get(jobs::get).delete(jobs::delete))
        .route("/api/v1/jobs/{id}/retry", post(jobs::retry))
        .route("/api/v1/jobs/{id}/cancel", post(jobs::cancel))
        .route("/api/v1/queues", get(queues::list))
        .route("/api/v1/queues/{queue}/pause", post(queues::pause))
        .route("/api/v1/queues/{queue}/resume", post(queues::resume))
        .route("/api/v1/queues/{queue}/limits", patch(limits::update))
        .route("/api/v1/stats", get(queues::stats))
        .route("/api/v1/nodes", get(nodes::list))
}

/// `GET /api/v1/openapi.json` (no authentication: it describes the API, holds no data).
pub(crate) async fn openapi() -> Response {
    let mut response = OPENAPI.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// `GET /api/v1/whoami`: the caller's role, so the dashboard can hide what it may not do.
async fn whoami(
    axum::extract::State(state): axum::extract::State<WebState>,
    Extension(role): Extension<Role>,
) -> Json<serde_json::Value> {
    Json(json!({ "role": role, "open": state.auth().is_open() }))
}

/// Any path with no route.
pub(crate) async fn not_found(method: Method, OriginalUri(uri): OriginalUri) -> ApiError {
    ApiError::not_found(format!("no route for {method} {}", uri.path()))
}

/// A route that exists, with the wrong method.
pub(crate) async fn method_not_allowed(method: Method, OriginalUri(uri): OriginalUri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{} does not accept {method}", uri.path()),
    )
}

/// A JSON object body, refused with hopper's error shape instead of axum's plain text
/// (an array or a scalar is refused too: see [`Object`]), and refused when it holds an
/// integer no 64-bit integer holds, which serde_json would read as the nearest double
/// ([`hopper::core::json_numbers`]): the message names its path (`args.id: the integer …`).
#[derive(Debug)]
pub(crate) struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        // JSON first (the content type, the size, the syntax), its integers then, and
        // only then `T`, whose fields would take a wide integer for a double.
        let Json(body) = Json::<Box<RawValue>>::from_request(req, state)
            .await
            .map_err(json_rejection)?;
        check_integers(body.get(), "").map_err(ApiError::bad_request)?;
        match Json::<Object<T>>::from_bytes(body.get().as_bytes()) {
            Ok(Json(Object(value))) => Ok(ApiJson(value)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(rejection: JsonRejection) -> ApiError {
    let status = rejection.status();
    let message = rejection.body_text();
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            status,
            "payload_too_large",
            "the request body is over the server's limit",
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(
            status,
            "unsupported_media_type",
            "send the body as JSON with Content-Type: application/json",
        ),
        _ => ApiError::bad_request(message),
    }
}
