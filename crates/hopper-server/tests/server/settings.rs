//! A server refuses at start, with an error that names the setting and before it registers
//! its node or binds, a setting it cannot run with (`ServeConfig::check`).

use std::time::Duration;

use crate::common::*;
use hopper::limits::MAX_DURATION;
use hopper::maintenance::Housekeeping;
use hopper::testing::TestDatabase;
use hopper_server::{ServeConfig, ServeError, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_a_server_cannot_run_with_are_refused_at_start() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let base = config(&db, Duration::from_secs(1)).await;
    let past = MAX_DURATION + Duration::from_millis(1);
    let with = |change: &dyn Fn(&mut ServeConfig)| {
        let mut config = base.clone();
        change(&mut config);
        config
    };
    let cases: Vec<(ServeConfig, &str)> = vec![
        (
            with(&|c| c.heartbeat = Duration::ZERO),
            "heartbeat must be at least 10ms",
        ),
        (
            with(&|c| c.lease = Duration::from_millis(1999)),
            "lease at least twice it",
        ),
        (with(&|c| c.heartbeat = Duration::MAX), "heartbeat of"),
        (with(&|c| c.lease = past), "lease of"),
        (
            with(&|c| c.poll_interval = Duration::ZERO),
            "poll_interval must be more than zero",
        ),
        (
            with(&|c| c.poll_interval = Duration::MAX),
            "poll_interval of",
        ),
        (
            with(&|c| c.handshake_timeout = Duration::ZERO),
            "handshake_timeout must be",
        ),
        (
            with(&|c| c.handshake_timeout = past),
            "handshake_timeout of",
        ),
        (
            with(&|c| c.unplaceable_delay = past),
            "unplaceable_delay of",
        ),
        (
            with(&|c| c.node_dead_after = Duration::from_millis(1999)),
            "node_dead_after of 1.999s is too short",
        ),
        (with(&|c| c.node_dead_after = past), "node_dead_after of"),
        (with(&|c| c.claim_batch = usize::MAX), "claim_batch of"),
        (with(&|c| c.pool_size = usize::MAX), "pool_size of"),
        (
            with(&|c| c.max_connections = usize::MAX),
            "max_connections of",
        ),
        (
            with(&|c| {
                c.housekeeping = Housekeeping::default().with_prune_interval(Some(Duration::ZERO))
            }),
            "prune_interval must be more than zero",
        ),
        (
            with(&|c| c.housekeeping = Housekeeping::default().with_completed_retention(past)),
            "completed_retention of",
        ),
    ];
    for (config, says) in cases {
        let err = Server::start(config).await.expect_err(says);
        assert!(matches!(err, ServeError::Invalid(_)), "{says}: {err:?}");
        assert!(err.to_string().contains(says), "{says}: {err}");
    }
    let sql = sql(&db).await?;
    let nodes: i64 = sql
        .query_one(&format!("SELECT count(*) FROM {}.nodes", db.schema()), &[])
        .await?
        .get(0);
    assert_eq!(nodes, 0, "no server registered its node");
    // The defaults run.
    Server::start(base).await?.shutdown().await;
    Ok(())
}
