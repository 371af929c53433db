//! Rows written into PostgreSQL by hand with counts no claim could leave: attempt counts
//! (an `attempt` at `i32::MAX` or below zero, an `uncounted` at `i32::MIN` or above the
//! attempt) and a queue's rate bucket (tokens at minus infinity, a refill time of
//! `infinity`). The claim of the job's queue, the rescuer and the release of dead nodes go
//! on for every other job, and such a job is failed as unreadable rather than left to stop
//! them at every try, or to be retried for ever. The SQLite twin is in
//! `crates/hopper-sqlite/tests/sqlite/poison.rs`.

use std::time::Duration;

use crate::hostile_rows::{job, write_by_hand};
use crate::support::connect;
use hopper::backend::{ClaimParams, NodeReleaseDeadParams};
use hopper::testing::TestDatabase;
use hopper::{JobState, NewJob, QueueUpdate};
use serde_json::json;
use uuid::Uuid;

fn claim(queue: &str, kinds: Option<Vec<String>>) -> ClaimParams {
    ClaimParams {
        queue: queue.to_owned(),
        node: Uuid::now_v7(),
        limit: 10,
        lease: Duration::from_secs(300),
        kinds,
    }
}

/// Every claim statement (plain, plain of some kinds, limited, fair) hands out the jobs
/// beside rows whose counts no claim could leave, and fails those rows; the next claim
/// finds nothing left to stop it.
#[tokio::test]
async fn a_claim_fails_a_job_whose_attempts_cannot_be_counted() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let backend = db.backend();
    backend
        .queue_update(&QueueUpdate {
            max_running: Some(Some(100)),
            ..QueueUpdate::new("limited")
        })
        .await?;
    let kinds = Some(vec!["k".to_owned()]);
    for (queue, kinds) in [
        ("plain", None),
        ("kinds", kinds),
        ("limited", None),
        ("fair", None),
    ] {
        let group = |n: usize| (queue == "fair").then(|| format!("g{n}"));
        let mut good = Vec::new();
        for n in 0..3 {
            let mut job = NewJob::new("k", json!({ "n": n })).with_queue(queue);
            if let Some(group) = group(n) {
                job = job.with_group(group);
            }
            backend.job_insert(&job).await?;
            good.push(job.id);
        }
        let group = group(9).map_or("NULL".to_owned(), |g| format!("'{g}'"));
        let mut bad = Vec::new();
        for (columns, values) in [
            (", attempt", "2147483647".to_owned()),
            (", attempt, uncounted", "5, -2147483648".to_owned()),
            (", uncounted", "2147483647".to_owned()),
            (", attempt", "-5".to_owned()),
            (", attempt, uncounted", "-1, -1".to_owned()),
        ] {
            let values = format!(", {values}, now() - interval '1 hour', {group}");
            let columns = format!("{columns}, run_at, group_key");
            bad.push(write_by_hand(&db, queue, "available", &columns, &values).await?);
        }

        let mut claimed = backend.job_claim(&claim(queue, kinds.clone())).await?;
        claimed.sort_by_key(|j| j.lease.job_id);
        let ids: Vec<Uuid> = claimed.iter().map(|j| j.lease.job_id).collect();
        assert_eq!(ids, good, "{queue}: every countable job was claimed");
        for id in bad {
            let job = job(&db, id).await?;
            assert_eq!(job.state, JobState::Failed, "{queue}: {job:?}");
            let last = job.errors.last().map(|e| e.error.as_str()).unwrap_or("");
            assert!(last.contains("could not be read"), "{queue}: {last}");
        }
        assert!(backend.job_claim(&claim(queue, kinds)).await?.is_empty());
    }
    Ok(())
}

/// The rescuer and the release of a dead node's jobs take back a running job whose
/// attempts used overflow (and dead-letter it: its attempts are not countable) along with
/// the others, instead of failing at every run (five failures make the process unhealthy).
#[tokio::test]
async fn the_rescuer_and_the_release_of_dead_nodes_survive_counts_past_range() -> anyhow::Result<()>
{
    let db = TestDatabase::new().await?;
    let backend = db.backend();
    let store = backend
        .maintenance()
        .ok_or_else(|| anyhow::anyhow!("PostgreSQL does maintenance"))?;
    let expired = ", attempt, uncounted, lease_expires_at";
    let hour_ago = "now() - interval '1 hour'";
    let bad = format!(", 5, -2147483648, {hour_ago}");
    let bad = write_by_hand(&db, "q", "running", expired, &bad).await?;
    let good = format!(", 1, 0, {hour_ago}");
    let good = write_by_hand(&db, "q", "running", expired, &good).await?;
    assert_eq!(store.job_rescue_expired().await?, 2);
    assert_eq!(job(&db, good).await?.state, JobState::Available);
    assert_eq!(
        job(&db, bad).await?.state,
        JobState::Failed,
        "5 - i32::MIN >= 25"
    );

    let node = Uuid::now_v7();
    let client = connect(db.url()).await?;
    let schema = db.schema();
    client
        .batch_execute(&format!(
            "INSERT INTO {schema}.nodes (id, name, heartbeat_at)
             VALUES ('{node}', 'gone', now() - interval '1 hour');
             UPDATE {schema}.jobs
             SET state = 'running', node_id = '{node}',
                 lease_expires_at = now() + interval '1 hour'"
        ))
        .await?;
    let released = store
        .node_release_dead(&NodeReleaseDeadParams {
            dead_after: Duration::from_secs(60),
        })
        .await?;
    assert_eq!(released, 2);
    assert_eq!(job(&db, good).await?.state, JobState::Available);
    assert_eq!(job(&db, bad).await?.state, JobState::Failed);
    Ok(())
}

/// A rate bucket written by hand (tokens at minus infinity, a refill time of `infinity`):
/// the queue's claims go on, the bucket read from its nearest bound or as never refilled,
/// instead of taking nothing for ever or failing at every claim.
#[tokio::test]
async fn a_rate_bucket_written_by_hand_stops_no_claim() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let backend = db.backend();
    let client = connect(db.url()).await?;
    let schema = db.schema();
    for (queue, set) in [
        (
            "minus-infinity",
            "rate_tokens = '-Infinity', rate_refilled_at = now() - interval '1 minute'",
        ),
        ("infinite-refill", "rate_refilled_at = 'infinity'"),
    ] {
        backend
            .job_insert(&NewJob::new("k", json!({})).with_queue(queue))
            .await?;
        backend
            .queue_update(&QueueUpdate {
                rate: Some(Some(hopper::RateLimit::new(10, Duration::from_secs(1)))),
                ..QueueUpdate::new(queue)
            })
            .await?;
        client
            .batch_execute(&format!(
                "UPDATE {schema}.queues SET {set} WHERE name = '{queue}'"
            ))
            .await?;
        let claimed = backend.job_claim(&claim(queue, None)).await?;
        assert_eq!(claimed.len(), 1, "{queue}");
    }
    Ok(())
}
