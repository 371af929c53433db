//! `hopper serve` with both the ZeroMQ server and the HTTP API: HTTP requests that wait on
//! a lock another transaction holds (an admin's cancels of a job an application holds
//! `FOR UPDATE`) wait on the HTTP API's own connections, so a client's submit through the
//! ZeroMQ server still goes through (with one pool for both, the cancels would take every
//! connection and the submit would wait for the holder). And they wait at most
//! `--http-lock-timeout`, answered 503 with the reason, while the API serves the rest,
//! behind PgBouncer in transaction mode too.

use std::time::Duration;

use crate::common::{http_request, serve_open_http};
use hopper::testing::{PgBouncer, RowHold, TestDatabase};
use hopper::{NewJob, RemoteBackend, RemoteOptions};

/// `POST /api/v1/jobs/{id}/cancel` on `addr`, answered once the lock lets it: the status
/// line.
fn cancel(addr: &str, id: hopper::JobId) -> anyhow::Result<String> {
    let path = format!("/api/v1/jobs/{id}/cancel");
    let response = http_request(addr, "POST", &path, Duration::from_secs(60))?;
    Ok(response.lines().next().unwrap_or_default().to_owned())
}

/// A new job whose row an open transaction holds.
async fn held_job(db: &TestDatabase) -> anyhow::Result<(hopper::JobId, RowHold)> {
    let job = NewJob::new("held", serde_json::json!({}));
    db.backend().job_insert(&job).await?;
    Ok((job.id, db.hold_job(job.id).await?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_requests_stuck_on_a_lock_leave_the_workers_connections() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (_serve, endpoint, addr) = serve_open_http(&db, &["--pool-size", "2"])?;

    let (held, holder) = held_job(&db).await?;
    let cancels: Vec<_> = (0..4)
        .map(|_| {
            let addr = addr.clone();
            std::thread::spawn(move || cancel(&addr, held))
        })
        .collect();
    // Two of them wait on the row (as many as there are connections to wait on).
    db.wait_for_lock_waits(2, Duration::from_secs(10)).await?;

    let mut options = RemoteOptions::from_url(&endpoint)?;
    options.request_timeout = Duration::from_secs(5);
    let remote = RemoteBackend::connect(options).await?;
    let submitted = NewJob::new("free", serde_json::json!({}));
    hopper::Client::new(std::sync::Arc::new(remote))
        .insert(submitted.clone())
        .await
        .map_err(|e| anyhow::anyhow!("the submit waited behind the HTTP requests: {e}"))?;

    holder.release().await?;
    // One cancels the job; the others find it cancelled.
    let mut statuses = Vec::new();
    for cancel in cancels {
        let status = cancel
            .join()
            .map_err(|_| anyhow::anyhow!("a cancel panicked"))??;
        statuses.push(
            status
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_owned(),
        );
    }
    statuses.sort();
    assert_eq!(statuses, ["200", "409", "409", "409"]);
    let stored = db
        .backend()
        .job_get(&hopper::backend::JobGetParams { id: submitted.id })
        .await?;
    assert!(stored.is_some(), "the submitted job is stored");
    Ok(())
}

/// Connected directly, and through PgBouncer in transaction mode (where the bound is a
/// `SET LOCAL` of the request's own transaction, and the cancel waited for the holder).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_request_waits_for_a_held_row_at_most_its_bound() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let bouncer = PgBouncer::start()?;
    let bound = ["--http-pool-size", "1", "--http-lock-timeout", "300ms"];
    let behind = ["--database-url", bouncer.url(), "--pooler", "transaction"];
    for route in [&[][..], &behind[..]] {
        let (_serve, _, addr) = serve_open_http(&db, &[&bound[..], route].concat())?;
        let (held, holder) = held_job(&db).await?;
        let path = format!("/api/v1/jobs/{held}/cancel");
        let request = |method: &'static str, path: String| {
            let addr = addr.clone();
            tokio::task::spawn_blocking(move || {
                http_request(&addr, method, &path, Duration::from_secs(60))
            })
        };
        let response = request("POST", path.clone()).await??;
        assert!(
            response.starts_with("HTTP/1.1 503"),
            "{route:?}: {response}"
        );
        assert!(
            response.contains("another transaction holds a lock"),
            "{response}"
        );
        // The one connection is free again: the API serves the rest, the row still held.
        let response = request("GET", "/api/v1/queues".to_owned()).await??;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        holder.release().await?;
        // Free, the row is cancelled.
        let response = request("POST", path).await??;
        assert!(
            response.starts_with("HTTP/1.1 200"),
            "{route:?}: {response}"
        );
    }
    Ok(())
}
