//! `hopper serve` with both the ZeroMQ server and the HTTP API shares one set of
//! whole-table readings between them: an expensive reading of the counts by state taken
//! for a ZeroMQ `queue_stats` is served to the HTTP API and `/metrics` too, and to the
//! ZeroMQ requests after it, while it is good (ten times as long as it took).

use std::time::{Duration, Instant};

use crate::common::{
    http_request, lock_the_jobs_table, metric, serve_open_http, wait_for_a_lock_wait,
};
use hopper::testing::TestDatabase;
use hopper::{Client, NewJob, RemoteBackend, RemoteOptions};

/// How long the test makes the reading take: well past the 50 ms from which a reading is
/// reused, so that it is served again for ten times as long (3 s).
const COST: Duration = Duration::from_millis(300);

async fn enqueue(db: &TestDatabase) -> anyhow::Result<()> {
    let job = NewJob::new("k", serde_json::json!({})).with_queue("mail");
    db.backend().job_insert(&job).await?;
    Ok(())
}

fn available(stats: &[hopper::QueueStats]) -> i64 {
    stats
        .iter()
        .find(|s| s.queue == "mail")
        .map_or(0, |s| s.available)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_api_and_the_zeromq_server_share_one_expensive_reading() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    enqueue(&db).await?;
    let (_serve, endpoint, addr) = serve_open_http(&db, &[])?;
    let remote = Client::new(std::sync::Arc::new(
        RemoteBackend::connect(RemoteOptions::from_url(&endpoint)?).await?,
    ));

    // A table this small is read in a millisecond, which is never reused. The test makes
    // the reading expensive: the jobs table is locked until the ZeroMQ request's reading
    // waits on the lock and has taken `COST`.
    let holder = lock_the_jobs_table(&db).await?;
    let asked = Instant::now();
    let first = tokio::spawn({
        let remote = remote.clone();
        async move { remote.stats().await }
    });
    // Other statements of the server (its maintenance) may wait on the lock too: this one
    // is told by its text.
    let reading = "%WHERE state = 'cancelled'%";
    wait_for_a_lock_wait(&db, reading, "the ZeroMQ queue_stats").await?;
    // The cost itself is time spent: nothing else makes a reading expensive.
    tokio::time::sleep(COST.saturating_sub(asked.elapsed())).await;
    holder.batch_execute("COMMIT").await?;
    assert_eq!(available(&first.await??), 1);

    // A job enqueued after that reading shows in none of the answers while it is good.
    enqueue(&db).await?;
    let queues = http_request(&addr, "GET", "/api/v1/queues", Duration::from_secs(20))?;
    let body = queues.split("\r\n\r\n").nth(1).unwrap_or_default();
    let json: serde_json::Value = serde_json::from_str(body)?;
    assert_eq!(json["queues"][0]["queue"], "mail", "{json}");
    // (A failure after 3 s would say the machine is too slow for this test, not that the
    // readings are not shared: hence the time in the messages.)
    assert_eq!(
        json["queues"][0]["available"],
        1,
        "the HTTP API serves the ZeroMQ request's reading ({:?} after it): {json}",
        asked.elapsed()
    );
    let sample = r#"hopper_jobs{queue="mail",state="available"}"#;
    assert_eq!(metric(&addr, sample)?, Some(1.0), "/metrics too");
    assert_eq!(
        available(&remote.stats().await?),
        1,
        "and ZeroMQ again ({:?} after it)",
        asked.elapsed()
    );
    assert_eq!(db.queue_stats("mail").await?.available, 2);
    Ok(())
}
