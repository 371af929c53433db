//! The whole-table readings through the server: `queue_stats` and `job_stats` are served
//! from the server's shared readings (`ServeConfig::readings`), so that a flood of them is
//! answered from one expensive reading while it is good, as the HTTP API's are, instead of
//! reading the jobs table whole for every request.

use std::time::Duration;

use crate::common::*;
use hopper::backend::{JobStatsParams, MinuteStats, StatsStore};
use hopper::readings::{Readings, StatsReuse};
use hopper::testing::TestDatabase;
use hopper::{Client, NewJob, QueueStats};

/// Every reading reused for an hour however cheap: how an expensive reading (a large
/// table) is treated, on a table of a few rows.
const AS_IF_EXPENSIVE: StatsReuse = StatsReuse {
    above: Duration::ZERO,
    factor: u32::MAX,
    at_most: Duration::from_secs(3600),
};

/// How many requests in a row are sent.
const FLOOD: usize = 40;

fn available(stats: &[QueueStats]) -> i64 {
    stats
        .iter()
        .find(|s| s.queue == "mail")
        .map_or(0, |s| s.available)
}

fn completed(minutes: &[MinuteStats]) -> i64 {
    minutes.iter().map(|m| m.completed).sum()
}

fn stats(client: &Client) -> &dyn StatsStore {
    client.backend().stats().expect("statistics")
}

fn window(minutes: u64) -> JobStatsParams {
    JobStatsParams {
        window: Duration::from_secs(minutes * 60),
    }
}

async fn enqueue(direct: &Client) -> anyhow::Result<()> {
    let job = NewJob::new("k", serde_json::json!({})).with_queue("mail");
    direct.insert(job).await?;
    Ok(())
}

/// Completes every available job of `mail` now, by hand.
async fn complete_all(db: &TestDatabase) -> anyhow::Result<u64> {
    let schema = db.schema().replace('"', "\"\"");
    let update = format!(
        "UPDATE \"{schema}\".jobs SET state = 'completed', attempt = 1, attempted_at = now(), \
         finished_at = now(), duration_ms = 1 WHERE queue = 'mail' AND state = 'available'"
    );
    Ok(sql(db).await?.execute(update.as_str(), &[]).await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_stats_requests_is_served_one_expensive_reading() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let mut reusing = config(&db, Duration::from_secs(1)).await;
    reusing.readings = Readings::new(AS_IF_EXPENSIVE);
    let server = start(reusing).await;
    let remote = Client::new(hopper::connect(&url(server.endpoint()), Default::default()).await?);
    let direct = Client::new(db.backend());

    // The first requests take the readings; every one after is served them, although the
    // table changes under each.
    enqueue(&direct).await?;
    assert_eq!(available(&remote.stats().await?), 1);
    assert_eq!(
        completed(&stats(&remote).job_stats_per_minute(&window(60)).await?),
        0
    );
    for n in 0..FLOOD {
        enqueue(&direct).await?;
        assert_eq!(available(&remote.stats().await?), 1, "queue_stats {n}");
    }
    assert_eq!(complete_all(&db).await?, 1 + FLOOD as u64);
    for n in 0..FLOOD {
        let minutes = stats(&remote).job_stats_per_minute(&window(60)).await?;
        assert_eq!(completed(&minutes), 0, "job_stats {n}");
    }
    // Another window is a reading of its own, taken now.
    let half = stats(&remote).job_stats_per_minute(&window(30)).await?;
    assert_eq!(completed(&half), 1 + FLOOD as i64);
    server.shutdown().await;

    // With the default reuse, a cheap reading (a table of a few rows) is taken anew for
    // every request: the counts stay exact.
    let server = start(config(&db, Duration::from_secs(1)).await).await;
    let remote = Client::new(hopper::connect(&url(server.endpoint()), Default::default()).await?);
    assert_eq!(available(&remote.stats().await?), 0);
    for n in 1..=3 {
        enqueue(&direct).await?;
        assert_eq!(available(&remote.stats().await?), n);
    }
    assert_eq!(
        completed(&stats(&remote).job_stats_per_minute(&window(60)).await?),
        1 + FLOOD as i64
    );
    complete_all(&db).await?;
    assert_eq!(
        completed(&stats(&remote).job_stats_per_minute(&window(60)).await?),
        4 + FLOOD as i64
    );
    server.shutdown().await;
    Ok(())
}
