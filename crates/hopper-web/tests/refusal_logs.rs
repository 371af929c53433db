//! Refused requests are logged, and tokens never are. In a test binary of its own: the
//! test captures what is logged on its thread, and `tracing` caches per event site whether
//! any subscriber wants it, a cache that other tests' threads, reaching the same sites at
//! the same moment, could leave saying "no one" (the refusal lines went missing in about
//! half the runs of the shared binary under `cargo test`).

#[path = "web/common.rs"]
#[allow(dead_code)]
mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use base64::Engine;
use serde_json::json;
use uuid::Uuid;

use common::{ADMIN, READ, Web};

/// What a test's subscriber wrote.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("poisoned"))?
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// Captures everything logged on this thread (the test's runtime) until the guard drops.
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter("debug")
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    fn text(&self) -> String {
        let bytes = self.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

#[tokio::test]
async fn refused_requests_are_logged_and_tokens_never_are() -> anyhow::Result<()> {
    let (logs, _guard) = Logs::capture();
    let web = Web::new().await?;
    let wrong = format!("wrong-token-{}", Uuid::now_v7().simple());
    let in_query = format!("query-secret-{}", Uuid::now_v7().simple());

    let jobs = "/api/v1/jobs";
    let none = web.call(Method::GET, jobs, None, None).await?;
    let bad = web.call(Method::GET, jobs, Some(&wrong), None).await?;
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("me:{wrong}"));
    let request = Request::builder()
        .uri(format!("{jobs}?token={in_query}"))
        .header(header::AUTHORIZATION, format!("Basic {basic}"))
        .body(Body::empty())?;
    let basic = web.send(request).await?;
    let read_only = web
        .call(Method::POST, jobs, Some(READ), Some(json!({"kind": "k"})))
        .await?;
    for (answer, status) in [
        (&none, StatusCode::UNAUTHORIZED),
        (&bad, StatusCode::UNAUTHORIZED),
        (&basic, StatusCode::UNAUTHORIZED),
        (&read_only, StatusCode::FORBIDDEN),
    ] {
        assert_eq!(answer.status, status, "{answer:?}");
        assert!(!answer.text.contains(&wrong), "the answer echoes no token");
    }
    assert_eq!(web.job_count().await?, 0, "nothing was enqueued");
    // The admin gets through, and that is not logged as a refusal.
    web.enqueue(json!({"kind": "k"})).await?;

    let text = logs.text();
    let refused: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("refused an HTTP request"))
        .collect();
    assert_eq!(refused.len(), 4, "{text}");
    assert!(refused.iter().all(|l| l.contains("WARN")), "{refused:#?}");
    assert_eq!(
        refused.iter().filter(|l| l.contains("status=401")).count(),
        3
    );
    assert!(
        refused
            .iter()
            .any(|l| l.contains("status=403") && l.contains("POST")),
        "{refused:#?}"
    );
    for secret in [ADMIN, READ, &wrong, &in_query, &basic_of(&wrong)] {
        assert!(!text.contains(secret), "{secret} reached the logs:\n{text}");
    }

    // A flood of refusals with a 60 KB path: the path is cut short, and no more than
    // REFUSALS_LOGGED lines a minute are written (4 were written above).
    let long = format!("/api/v1/jobs/{}", "x".repeat(60_000));
    for _ in 0..3 * hopper_web::REFUSALS_LOGGED {
        let answer = web.call(Method::GET, &long, None, None).await?;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    }
    let text = logs.text();
    let refused: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("refused an HTTP request"))
        .collect();
    assert_eq!(refused.len(), hopper_web::REFUSALS_LOGGED as usize);
    assert!(refused[4].contains("(60013 bytes)"), "{}", refused[4]);
    let longest = text.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 1000, "a log line of {longest} bytes");
    assert_eq!(web.get("/api/v1/jobs").await?.status, StatusCode::OK);
    Ok(())
}

fn basic_of(token: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("me:{token}"))
}
