//! Unique keys under concurrent inserts, single and bulk, and the three policies.

use std::sync::Arc;

use hopper::testing::TestDatabase;
use hopper::{Client, Error, InsertOutcome, JobListParams, JobState, NewJob, UniquePolicy};

use super::common::{node, probe};

async fn jobs_with_label(client: &Client, queue: &str) -> anyhow::Result<Vec<hopper::JobRecord>> {
    Ok(client
        .jobs(&JobListParams {
            queue: Some(queue.to_owned()),
            limit: 10_000,
            ..JobListParams::default()
        })
        .await?)
}

/// 8 concurrent inserters of the same key (each its own node and pool) yield one job, and
/// every one of them is told its id.
#[tokio::test]
async fn eight_concurrent_inserters_yield_one_job() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let barrier = Arc::new(tokio::sync::Barrier::new(8));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let client = Client::new(node(&db).await?);
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let job = probe("uniq", &format!("inserter {i}"), 0).with_unique_key("report:42");
            barrier.wait().await;
            client.insert(job).await
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await??);
    }
    let client = Client::new(db.backend());
    let stored = jobs_with_label(&client, "uniq").await?;
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert!(ids.iter().all(|id| *id == stored[0].id), "{ids:?}");
    Ok(())
}

/// The same through bulk inserts: 8 concurrent batches of 100 jobs, each holding the key.
#[tokio::test]
async fn eight_concurrent_bulk_inserts_yield_one_job_per_key() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let barrier = Arc::new(tokio::sync::Barrier::new(8));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let client = Client::new(node(&db).await?);
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let mut batch: Vec<NewJob> = (0..99)
                .map(|n| probe("bulk", &format!("plain {i}/{n}"), 0))
                .collect();
            batch.insert(50, probe("bulk", "keyed", 0).with_unique_key("sync:acme"));
            barrier.wait().await;
            client.upsert_many(&batch).await
        }));
    }
    let mut inserted_keyed = 0;
    for task in tasks {
        let outcomes = task.await??;
        assert_eq!(outcomes.len(), 100);
        if outcomes[50] == InsertOutcome::Inserted {
            inserted_keyed += 1;
        }
    }
    let client = Client::new(db.backend());
    let stored = jobs_with_label(&client, "bulk").await?;
    let keyed = stored.iter().filter(|j| j.args["label"] == "keyed").count();
    assert_eq!((inserted_keyed, keyed, stored.len()), (1, 1, 8 * 99 + 1));
    Ok(())
}

/// reject fails with Conflict, ignore answers the holder, replace updates a waiting holder;
/// once the holder finished the key is free again, unless a window still holds it.
#[tokio::test]
async fn policies_and_windows() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = Client::new(db.backend());
    let first = client
        .insert(probe("pol", "v1", 0).with_unique_key("k"))
        .await?;

    let rejected = client
        .insert(
            probe("pol", "v2", 0)
                .with_unique_key("k")
                .with_unique_policy(UniquePolicy::Reject),
        )
        .await;
    assert!(matches!(rejected, Err(Error::Conflict(_))), "{rejected:?}");
    assert_eq!(
        client
            .insert(probe("pol", "v2", 0).with_unique_key("k"))
            .await?,
        first
    );
    let replaced = client
        .upsert(
            probe("pol", "v3", 0)
                .with_unique_key("k")
                .with_unique_policy(UniquePolicy::Replace),
        )
        .await?;
    assert_eq!(replaced, InsertOutcome::Replaced { existing: first });
    let job = client.job(first).await?.expect("exists");
    assert_eq!(job.args["label"], "v3");

    // Finished: the key is free again.
    client.cancel(first).await?;
    let second = client
        .insert(probe("pol", "v4", 0).with_unique_key("k"))
        .await?;
    assert_ne!(second, first);

    // With a window, a finished job still holds the key for the rest of its window.
    // The longest window allowed (ten years): both inserts fall in the same one.
    let hour = hopper::limits::MAX_DURATION;
    let w1 = client
        .insert(
            probe("pol", "w1", 0)
                .with_unique_key("w")
                .with_unique_window(hour),
        )
        .await?;
    client.cancel(w1).await?;
    let w2 = client
        .upsert(
            probe("pol", "w2", 0)
                .with_unique_key("w")
                .with_unique_window(hour),
        )
        .await?;
    assert_eq!(w2, InsertOutcome::Duplicate { existing: w1 });
    assert_eq!(
        client.job(w1).await?.map(|j| j.state),
        Some(JobState::Cancelled)
    );
    Ok(())
}
