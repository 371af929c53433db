//! A runtime refuses at start, with an error that names the setting and before it registers
//! its node, a setting it cannot run with (`RuntimeConfig::check`): some used to panic one
//! of its tasks (a poll interval or a prefetch too large), others to claim nothing (no
//! queue) or to query the database without pause (a zero interval, the pruner's too). The
//! bounds themselves run.

use std::time::Duration;

use crate::support::{FnWorker, config, connect, wait_for};
use hopper::limits::{MAX_COUNT, MAX_DURATION};
use hopper::maintenance::Housekeeping;
use hopper::testing::TestDatabase;
use hopper::{Client, Error, NewJob, Runtime, RuntimeConfig, Workers};

job_kind!(Plain, "plain");

const QUEUE: &str = "settings";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_a_runtime_cannot_run_with_are_refused_at_start() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    // Heartbeats every 200 ms.
    let base = || config(QUEUE, 2);
    let past = MAX_DURATION + Duration::from_millis(1);
    let cases: Vec<(RuntimeConfig, &str)> = vec![
        (
            base().with_queues(Vec::<String>::new()),
            "at least one queue",
        ),
        (base().with_queues([QUEUE, "a'b"]), "queue name \"a'b\""),
        (base().with_poll_interval(Duration::MAX), "poll_interval of"),
        (
            base().with_poll_interval(Duration::ZERO),
            "poll_interval must be more than zero",
        ),
        (
            base().with_rescue_interval(Duration::ZERO),
            "rescue_interval must be more",
        ),
        (base().with_rescue_interval(past), "rescue_interval of"),
        (
            base().with_heartbeat_interval(past),
            "heartbeat_interval of",
        ),
        (
            base().with_lease(Duration::ZERO),
            "a lease of 0ns is too short",
        ),
        (
            base().with_lease(Duration::from_millis(29)),
            "too short: at least 30ms",
        ),
        (base().with_lease(past), "lease of"),
        (
            base().with_shutdown_timeout(Duration::MAX),
            "shutdown_timeout of",
        ),
        (base().with_node_dead_after(past), "node_dead_after of"),
        (
            base().with_node_dead_after(Duration::from_millis(399)),
            "at least twice the heartbeat (200ms)",
        ),
        (base().with_prefetch(usize::MAX), "prefetch of"),
        (base().with_concurrency(usize::MAX), "concurrency of"),
        (
            base().with_claim_batch(MAX_COUNT + 1),
            "claim_batch of 1000001 is too large",
        ),
        (base().with_complete_batch(usize::MAX), "complete_batch of"),
        (
            base().with_claims_in_flight(usize::MAX),
            "claims_in_flight of",
        ),
        (
            base().with_blocking_threads(usize::MAX),
            "blocking_threads of",
        ),
        (
            base().with_housekeeping(
                Housekeeping::default().with_prune_interval(Some(Duration::ZERO)),
            ),
            "prune_interval must be more than zero",
        ),
        (
            base().with_housekeeping(Housekeeping::default().with_vacuum_interval(Some(past))),
            "vacuum_interval of",
        ),
        (
            base().with_housekeeping(Housekeeping::default().with_completed_retention(past)),
            "completed_retention of",
        ),
        (
            base().with_housekeeping(Housekeeping::default().with_failed_retention(Duration::MAX)),
            "failed_retention of",
        ),
        (
            base().with_housekeeping(Housekeeping::default().with_prune_pause(past)),
            "prune_pause of",
        ),
        (
            base().with_housekeeping(Housekeeping::default().with_prune_batch(u32::MAX)),
            "prune_batch of",
        ),
    ];
    for (config, says) in cases {
        let err = Runtime::new(db.backend(), Workers::new(), config)
            .start()
            .await
            .expect_err(says);
        assert!(matches!(err, Error::InvalidInput(_)), "{says}: {err:?}");
        assert!(err.to_string().contains(says), "{says}: {err}");
    }
    let sql = connect(db.url()).await?;
    let nodes: i64 = sql
        .query_one(&format!("SELECT count(*) FROM {}.nodes", db.schema()), &[])
        .await?
        .get(0);
    assert_eq!(nodes, 0, "no runtime registered its node");

    // At the bounds: the shortest lease, the longest waits, the largest counts.
    let edge = base()
        .with_lease(RuntimeConfig::MIN_LEASE)
        .with_node_dead_after(Duration::from_millis(20))
        .with_poll_interval(MAX_DURATION)
        .with_rescue_interval(MAX_DURATION)
        .with_shutdown_timeout(MAX_DURATION)
        .with_prefetch(MAX_COUNT)
        .with_claim_batch(MAX_COUNT)
        .with_concurrency(MAX_COUNT)
        .with_housekeeping(
            Housekeeping::default()
                .with_completed_retention(MAX_DURATION)
                .with_failed_retention(MAX_DURATION)
                .with_prune_interval(Some(MAX_DURATION))
                .with_vacuum_interval(None),
        );
    let id = Client::new(db.backend())
        .insert(NewJob::of(&Plain { n: 1 })?.with_queue(QUEUE))
        .await?;
    let mut workers = Workers::new();
    workers.register(FnWorker::new(|_ctx, _: Plain| async move { Ok(()) }));
    let handle = Runtime::new(db.backend(), workers, edge).start().await?;
    wait_for(&db, QUEUE, Duration::from_secs(10), |s| s.completed == 1).await?;
    handle.shutdown().await;
    let job = Client::new(db.backend()).job(id).await?;
    assert!(job.is_some_and(|j| j.attempt == 1 && j.errors.is_empty()));
    Ok(())
}
