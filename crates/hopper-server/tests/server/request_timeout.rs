//! A request the server does not answer in time (an admin's cancel of a job whose row an
//! open transaction holds) fails in the Rust client with an error that says so, not as if
//! the client had shut down (the client's heartbeat clears requests past their time, and
//! must answer them rather than drop them). A timeout too long to add to the clock waits
//! for the reply.

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use hopper::testing::TestDatabase;
use hopper::{Client, NewJob, RemoteBackend, RemoteOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_its_time_says_so() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    // Heartbeats every 100 ms: one comes between the request's time and the caller's own
    // bound, a second later.
    let server = start(config(&db, Duration::from_millis(100)).await).await;
    let job = NewJob::new("held", serde_json::json!({}));
    db.backend().job_insert(&job).await?;
    let hold = db.hold_job(job.id).await?;
    let mut options = RemoteOptions::from_url(&format!("{}?token={TOKEN}", server.endpoint()))?;
    options.request_timeout = Duration::from_millis(500);
    let client = Client::new(Arc::new(RemoteBackend::connect(options).await?));
    let err = client
        .cancel(job.id)
        .await
        .expect_err("the cancel waits on the held row");
    let said = err.with_causes();
    assert!(said.contains("no reply from the hopper server"), "{said}");
    assert!(err.is_transient(), "{said}");
    hold.release().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_timeout_past_the_clock_waits_for_the_reply() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_millis(100)).await).await;
    let mut options = RemoteOptions::from_url(&format!("{}?token={TOKEN}", server.endpoint()))?;
    options.request_timeout = Duration::MAX;
    let client = Client::new(Arc::new(RemoteBackend::connect(options).await?));
    let id = client
        .insert(NewJob::new("plain", serde_json::json!({})))
        .await?;
    assert!(client.job(id).await?.is_some(), "answered");
    Ok(())
}
