//! What every web test shares: a router over its own schema, tokens, and one call helper.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use hopper::JobId;
use hopper::backend::{Backend, ClaimParams, Finish, Outcome};
use hopper::testing::TestDatabase;
use hopper_web::{AuthConfig, WebState};
use serde_json::Value;
use tower::ServiceExt;

/// The admin token of every test router.
pub const ADMIN: &str = "admin-token-for-tests-0001";
/// The read-only token of every test router.
pub const READ: &str = "read-token-for-tests-0001";

/// A test's own schema and a router over it, with both tokens configured.
pub struct Web {
    pub db: TestDatabase,
    pub router: Router,
}

/// An HTTP answer: status, headers and the body (parsed as JSON when it is JSON).
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: axum::http::HeaderMap,
    pub text: String,
    pub json: Value,
}

impl Answer {
    /// The value of the header `name`, or `""` when it is missing or not text.
    pub fn header(&self, name: header::HeaderName) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

impl Web {
    /// A fresh schema with the usual tokens.
    pub async fn new() -> anyhow::Result<Self> {
        let auth = AuthConfig::tokens([ADMIN], [READ])?;
        Self::with_auth(auth).await
    }

    /// A fresh schema with `auth`.
    pub async fn with_auth(auth: AuthConfig) -> anyhow::Result<Self> {
        let db = TestDatabase::new().await?;
        let router = hopper_web::router(WebState::new(db.backend(), auth));
        Ok(Web { db, router })
    }

    /// The backend under the router.
    pub fn backend(&self) -> Arc<dyn Backend> {
        self.db.backend()
    }

    /// Sends one request in-process.
    pub async fn call(
        &self,
        method: Method,
        uri: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> anyhow::Result<Answer> {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = match body {
            Some(body) => request
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from(serde_json::to_vec(&body)?))?,
            None => request.body(Body::empty())?,
        };
        self.send(request).await
    }

    /// Sends a prepared request in-process.
    pub async fn send(&self, request: Request<Body>) -> anyhow::Result<Answer> {
        let response = self.router.clone().oneshot(request).await?;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Answer {
            status,
            headers,
            text,
            json,
        })
    }

    /// `GET` as the admin.
    pub async fn get(&self, uri: &str) -> anyhow::Result<Answer> {
        self.call(Method::GET, uri, Some(ADMIN), None).await
    }

    /// `POST` a JSON body as the admin.
    pub async fn post(&self, uri: &str, body: Value) -> anyhow::Result<Answer> {
        self.call(Method::POST, uri, Some(ADMIN), Some(body)).await
    }

    /// Enqueues one job through the API and returns its id.
    pub async fn enqueue(&self, body: Value) -> anyhow::Result<JobId> {
        let answer = self.post("/api/v1/jobs", body).await?;
        anyhow::ensure!(answer.status == StatusCode::CREATED, "enqueue: {answer:?}");
        Ok(serde_json::from_value(answer.json["id"].clone())?)
    }

    /// Claims every available job of `queue` and ends each attempt with `outcome`.
    pub async fn work(&self, queue: &str, outcome: Outcome) -> anyhow::Result<usize> {
        let backend = self.backend();
        let claimed = backend
            .job_claim(&ClaimParams {
                queue: queue.to_owned(),
                node: uuid::Uuid::now_v7(),
                limit: 1000,
                lease: Duration::from_secs(60),
                kinds: None,
            })
            .await?;
        let finishes: Vec<Finish> = claimed
            .iter()
            .map(|c| Finish {
                lease: c.lease,
                outcome: outcome.clone(),
            })
            .collect();
        backend.job_finish_many(&finishes).await?;
        Ok(claimed.len())
    }

    /// How many jobs the schema holds, whatever their state.
    pub async fn job_count(&self) -> anyhow::Result<i64> {
        let stats = self.backend().queue_stats().await?;
        Ok(stats
            .iter()
            .map(|s| s.scheduled + s.available + s.running + s.completed + s.failed + s.cancelled)
            .sum())
    }
}

/// The `error.code` of an error answer.
/// Asserts that `GET uri` is refused as invalid input (400), with a message holding
/// `expected` (the parameter at fault).
pub async fn assert_refused(web: &Web, uri: &str, expected: &str) -> anyhow::Result<()> {
    let answer = web.get(uri).await?;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{uri}: {answer:?}");
    assert_eq!(code(&answer), "invalid_input", "{uri}");
    assert!(
        message(&answer).contains(expected),
        "{uri}: {:?}",
        message(&answer)
    );
    Ok(())
}

pub fn code(answer: &Answer) -> &str {
    answer.json["error"]["code"].as_str().unwrap_or("")
}

/// The `error.message` of an error answer.
pub fn message(answer: &Answer) -> &str {
    answer.json["error"]["message"].as_str().unwrap_or("")
}

/// A permanent failure.
pub fn failed() -> Outcome {
    Outcome::Failed {
        error: "boom".to_owned(),
        duration_ms: 7,
    }
}

/// A success.
pub fn completed() -> Outcome {
    Outcome::Completed { duration_ms: 12 }
}
