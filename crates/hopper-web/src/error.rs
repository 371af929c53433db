//! Errors: the API's error responses ([`ApiError`]) and this crate's own [`Error`].
//!
//! Every failed request gets a status code and a JSON body of one shape:
//!
//! ```json
//! {"error": {"code": "invalid_input", "message": "queue name \"a b\" has the character ' '; ..."}}
//! ```

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// What can go wrong setting up or running the web server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is unusable (a short token, no tokens and not open, …).
    #[error("web configuration: {0}")]
    Config(String),

    /// Binding or serving the socket failed.
    #[error("web server: {0}")]
    Io(#[from] std::io::Error),

    /// The Prometheus recorder could not be installed (one is installed already).
    #[error("metrics recorder: {0}")]
    Metrics(String),
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error answered to an API request: a status, a stable machine-readable code and a
/// message for people.
#[derive(Debug, Clone)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    /// An error with an explicit status and code.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400: the request is malformed or its content invalid. Nothing was written.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", message)
    }

    /// 401: no credentials, or unknown ones.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 403: the credentials are valid but do not allow this.
    pub fn forbidden(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 404: no such thing.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The machine-readable code (`invalid_input`, `not_found`, …).
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The message for people.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<hopper::Error> for ApiError {
    fn from(e: hopper::Error) -> Self {
        use hopper::Error as E;
        match e {
            E::InvalidInput(m) => ApiError::bad_request(m),
            E::Args(e) => ApiError::bad_request(format!("job arguments: {e}")),
            E::NotFound(m) => ApiError::not_found(format!("not found: {m}")),
            E::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "conflict", m),
            E::LeaseLost(_) => ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string()),
            E::Unsupported(m) => ApiError::new(
                StatusCode::NOT_IMPLEMENTED,
                "unsupported",
                format!("unsupported by this backend: {m}"),
            ),
            E::Shutdown => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "shutting down",
            ),
            E::Database(_) if e.is_lock_not_granted() => {
                tracing::warn!(error = %e.with_causes(), "API request gave up waiting for a lock");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "another transaction holds a lock this request needs (a job's or a \
                     queue's row, say); try again once it is released",
                )
            }
            E::Database(_) => {
                // The driver's message may name hosts, users or statements: keep it in the
                // log, give the caller only what it needs.
                tracing::error!(error = %e.with_causes(), "API request failed in the database");
                ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "unavailable",
                    "the database failed or could not be reached; see the server log",
                )
            }
            other => {
                tracing::error!(error = %other, "API request failed");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "internal error; see the server log",
                )
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": { "code": self.code, "message": self.message } });
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            // Bearer, not Basic: a Basic challenge would make browsers pop up their own
            // login prompt over the dashboard's.
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"hopper\""),
            );
        }
        response
    }
}
