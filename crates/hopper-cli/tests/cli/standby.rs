//! `hopper worker` and `hopper serve` pointed at a standby (a failover under way, an address
//! that still leads to the old primary's replica): both wait for the database to take
//! writes, as they wait for one that is restarting, and start once it does, here when the
//! standby is promoted.
//!
//! Two private clusters, a primary and its streaming standby (`pg_basebackup -R`).

use std::time::{Duration, Instant};

use hopper::testing::TestCluster;
use hopper::{Client, JobState, NewJob, PgBackend, PgOptions};

use crate::common::Hopper;

#[tokio::test]
async fn worker_and_serve_on_a_standby_wait_until_it_takes_writes() -> anyhow::Result<()> {
    let (_primary, standby) = TestCluster::migrated_with_standby("standby1")
        .await
        .map_err(anyhow::Error::from_boxed)?;
    let url = standby.url("sslmode=disable");

    let mut worker = Hopper::start_at(&url, &["worker", "--queue", "standby"])?;
    let mut serve = Hopper::start_at(
        &url,
        &[
            "serve",
            "--listen",
            "tcp://127.0.0.1:0",
            "--insecure-no-auth",
        ],
    )?;
    for (name, process) in [("worker", &worker), ("serve", &serve)] {
        let waiting = process
            .line_with("retrying", Duration::from_secs(30))
            .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        assert!(waiting.contains("read-only"), "{name}: {waiting}");
    }
    for (name, process) in [("worker", &mut worker), ("serve", &mut serve)] {
        let exited = process.child.try_wait()?;
        assert!(exited.is_none(), "{name} gave up on a standby: {exited:?}");
    }

    standby.promote().map_err(anyhow::Error::msg)?;
    serve.line_with("listening on", Duration::from_secs(60))?;
    let client = Client::new(std::sync::Arc::new(
        PgBackend::connect(&url, PgOptions::default()).await?,
    ));
    let id = loop {
        match client
            .insert(NewJob::new("bench", serde_json::json!({"n": 1})).with_queue("standby"))
            .await
        {
            Ok(id) => break id,
            // The promotion may not have reached this connection's session yet.
            Err(e) if e.is_transient() => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => return Err(e.into()),
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while client.job(id).await?.map(|job| job.state) != Some(JobState::Completed) {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the worker never ran the job after the promotion: {:?}",
            worker.rest()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
