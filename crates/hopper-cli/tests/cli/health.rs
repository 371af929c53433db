//! `hopper serve` with its HTTP endpoint, made unhealthy by real means: `/health` answers 200
//! while every supervised task runs; once the promoter's table is renamed away in the
//! test's own schema, the promoter fails at each run, the supervisor gives up after its
//! failure budget, `/health` answers 503 naming the task, and the process exits non-zero.

use std::time::{Duration, Instant};

use crate::common::{http_request, serve_open_http};
use hopper::testing::TestDatabase;

/// `GET /health` on `addr`: the status code and the body.
fn health(addr: &str) -> anyhow::Result<(u16, String)> {
    let response = http_request(addr, "GET", "/health", Duration::from_secs(5))?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no status line: {response:?}"))?;
    let body = response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    Ok((code, body))
}

/// Polls `/health` until `done(code, body)`, for at most `limit`.
fn health_until(
    addr: &str,
    limit: Duration,
    done: impl Fn(u16, &str) -> bool,
) -> anyhow::Result<(u16, String)> {
    let start = Instant::now();
    loop {
        let (code, body) = health(addr)?;
        if done(code, &body) {
            return Ok((code, body));
        }
        anyhow::ensure!(
            start.elapsed() < limit,
            "still {code} {body} after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test]
async fn a_task_that_keeps_failing_makes_serve_unhealthy_and_exit() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (mut serve, _, addr) = serve_open_http(&db, &[])?;

    let (code, body) = health(&addr)?;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"ok\""), "{body}");

    // The promoter's table goes away (in this test's own schema): every promotion fails.
    let (client, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    client
        .batch_execute(&format!(
            "ALTER TABLE {}.jobs RENAME TO jobs_gone",
            db.schema()
        ))
        .await?;

    // Five failures with backoff (0.1 + 0.2 + 0.4 + 0.8 s) then 503 until the server has
    // stopped its tasks; polled often enough to see it.
    let (_, body) = health_until(&addr, Duration::from_secs(30), |code, _| code != 200)
        .map_err(|e| anyhow::anyhow!("no 503 seen before the process exited: {e}"))?;
    assert!(body.contains("\"unhealthy\""), "{body}");
    assert!(body.contains("\"promoter\""), "the task is named: {body}");

    let start = Instant::now();
    let status = loop {
        if let Some(status) = serve.child.try_wait()? {
            break status;
        }
        anyhow::ensure!(start.elapsed() < Duration::from_secs(30), "never exited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(!status.success(), "exits non-zero: {status:?}");
    let said = serve.rest();
    assert!(
        said.iter()
            .any(|l| l.contains("giving up") && l.contains("promoter")),
        "the log says so: {said:?}"
    );
    Ok(())
}
