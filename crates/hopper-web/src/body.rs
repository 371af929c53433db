//! Request bodies read whole, within a deadline, before a handler sees them. hyper bounds
//! how long headers take ([`crate::ConnectionLimits::with_header_timeout`]) but not the
//! body after them, which a client could send a byte at a time for as long as it liked,
//! holding one of the server's connections and a task. Applied after authentication, so
//! a caller without a token still gets its 401 at once, its body unread.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::WebState;
use crate::error::ApiError;

/// How long a request's body may take to arrive by default, from the end of its headers:
/// a job's arguments at their largest (1 MiB) at 35 KB/s, a body at the default limit
/// ([`crate::DEFAULT_MAX_BODY_BYTES`], 16 MiB) at 560 KB/s.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// Reads the body (at most the state's limit) within the state's body timeout and hands
/// the request on with it. Too slow: 408, and the connection is closed. Too large: 413, at
/// once when its `Content-Length` says so: before any byte of it is read, and before
/// hyper answers an `Expect: 100-continue` (which it does when the body is first read), so
/// the client neither sends it nor waits for the body timeout.
pub(crate) async fn read_within_deadline(
    State(state): State<WebState>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let deadline = state.body_timeout();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let limit = state.max_body_bytes();
    let refusal = if declared.is_some_and(|n| n > u64::try_from(limit).unwrap_or(u64::MAX)) {
        too_large()
    } else {
        match tokio::time::timeout(deadline, axum::body::to_bytes(body, limit)).await {
            Ok(Ok(bytes)) => {
                return next
                    .run(Request::from_parts(parts, Body::from(bytes)))
                    .await;
            }
            Ok(Err(e)) if is_over_limit(&e) => too_large(),
            Ok(Err(e)) => ApiError::bad_request(format!("the request body could not be read: {e}")),
            Err(_) => ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                format!("the request body did not arrive within {deadline:?}"),
            ),
        }
    };
    state.log_refusal(&Request::from_parts(parts, Body::empty()), &refusal);
    let mut response = refusal.into_response();
    // What is left of the body is never read: the connection cannot carry another request.
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// 413: the body is over the server's limit.
fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        "the request body is over the server's limit",
    )
}

fn is_over_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = source {
        if error.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = error.source();
    }
    false
}
