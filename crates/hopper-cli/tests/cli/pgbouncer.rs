//! The `hopper` binary behind a real PgBouncer in transaction mode (`HOPPER_POOLER=
//! transaction`, `docs/deployment.md`): the demo, and the bench's enqueue and drain, with
//! `DATABASE_URL` pointing at the pooler.

use hopper::testing::{PgBouncer, PgBouncerConfig, TestDatabase};
use serde_json::Value;
use tokio::process::Command;

/// Runs `hopper --json ARGS` through `bouncer` on the test's schema, with `direct` as the
/// direct URL (none: polling); returns its output's JSON values.
async fn hopper(
    db: &TestDatabase,
    bouncer: &PgBouncer,
    direct: Option<&str>,
    args: &[&str],
) -> anyhow::Result<Vec<Value>> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hopper"));
    command
        .env("DATABASE_URL", bouncer.url())
        .env("HOPPER_SCHEMA", db.schema())
        .env("HOPPER_POOLER", "transaction")
        .env_remove("HOPPER_DIRECT_URL")
        .env_remove("HOPPER_LOG")
        .arg("--json")
        .args(args);
    if let Some(direct) = direct {
        command.env("HOPPER_DIRECT_URL", direct);
    }
    let output = command.output().await?;
    anyhow::ensure!(
        output.status.success(),
        "{args:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout)?;
    serde_json::Deserializer::from_str(&stdout)
        .into_iter()
        .map(|v| Ok(v?))
        .collect()
}

#[tokio::test]
async fn the_demo_runs_through_pgbouncer() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let bouncer = PgBouncer::start()?;
    for direct in [None, Some(db.url())] {
        let lines = hopper(&db, &bouncer, direct, &["demo", "--jobs", "120"]).await?;
        let summary = lines.first().ok_or_else(|| anyhow::anyhow!("no output"))?;
        assert_eq!(summary["completed"], 110, "{summary}");
        assert_eq!(summary["failed"], 10, "{summary}");
        let queue = summary["queue"].as_str().unwrap_or_default();
        let stats = db.queue_stats(queue).await?;
        assert_eq!((stats.completed, stats.failed), (110, 10));
    }
    Ok(())
}

#[tokio::test]
async fn the_bench_enqueues_and_drains_through_pgbouncer() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let bouncer = PgBouncer::start()?;
    let enqueue = ["bench", "--workload", "enqueue", "--jobs", "2000"];
    hopper(&db, &bouncer, None, &enqueue).await?;
    let drain = ["bench", "--workload", "drain", "--concurrency", "16"];
    let lines = hopper(&db, &bouncer, None, &drain).await?;
    let drained = lines.first().ok_or_else(|| anyhow::anyhow!("no output"))?;
    assert_eq!(drained["jobs"].as_f64(), Some(2000.0), "{drained}");
    let stats = db.queue_stats("bench").await?;
    assert_eq!((stats.completed, stats.available), (2000, 0), "{stats:?}");
    Ok(())
}

/// Without `HOPPER_POOLER=transaction`, two `hopper` processes in a row share the
/// pooler's one server session, and the second names its first prepared statement as the
/// first one did: the server refuses it (SQLSTATE 42P05). The error names the setting.
#[tokio::test]
async fn a_shared_server_session_is_refused_naming_the_pooler_setting() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let bouncer = PgBouncer::start_with(&PgBouncerConfig::default().with_pool_size(1))?;
    let enqueue = |n: u32| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_hopper"));
        command
            .env("DATABASE_URL", bouncer.url())
            .env("HOPPER_SCHEMA", db.schema())
            .env_remove("HOPPER_POOLER")
            .env_remove("HOPPER_LOG")
            .args([
                "enqueue",
                "--kind",
                "k",
                "--args",
                &format!("{{\"n\":{n}}}"),
            ]);
        command
    };
    let first = enqueue(1).output().await?;
    assert!(first.status.success(), "{first:?}");
    let second = enqueue(2).output().await?;
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "{said}");
    assert!(said.contains("42P05"), "{said}");
    assert!(said.contains("HOPPER_POOLER=transaction"), "{said}");
    Ok(())
}
