//! The adapter keeps `bench-peers/harness.py`'s contract: each command, run as the harness
//! runs it (a child process, `DATABASE_URL` in the environment, lines on stdout), against
//! the real database in a schema of its own (`HOPPER_SCHEMA`), with small counts.

use std::process::Stdio;
use std::time::Duration;

use hopper::testing::TestDatabase;
use hopper::{Client, QueueStats};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

const QUEUE: &str = "default";
const LIMIT: Duration = Duration::from_secs(30);

fn adapter(db: &TestDatabase, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hopper-bench-peer"));
    command
        .args(args)
        .env("DATABASE_URL", db.url())
        .env("HOPPER_SCHEMA", db.schema())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Runs a command to its end; returns its stdout, failing on a non-zero exit.
async fn run(db: &TestDatabase, args: &[&str]) -> anyhow::Result<String> {
    let output = adapter(db, args).output().await?;
    anyhow::ensure!(
        output.status.success(),
        "{args:?}: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8(output.stdout)?)
}

fn elapsed(out: &str) -> anyhow::Result<f64> {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("ELAPSED_S "))
        .ok_or_else(|| anyhow::anyhow!("no ELAPSED_S in {out:?}"))?;
    Ok(line.trim().parse()?)
}

/// Reads lines until one starts with `prefix`; returns the rest of it.
async fn line_starting(
    lines: &mut Lines<BufReader<ChildStdout>>,
    prefix: &str,
) -> anyhow::Result<String> {
    let read = async {
        while let Some(line) = lines.next_line().await? {
            if let Some(rest) = line.strip_prefix(prefix) {
                return Ok(rest.to_owned());
            }
        }
        anyhow::bail!("stdout ended before a line starting with {prefix:?}")
    };
    tokio::time::timeout(LIMIT, read).await?
}

fn stdout_lines(child: &mut Child) -> anyhow::Result<Lines<BufReader<ChildStdout>>> {
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    Ok(BufReader::new(stdout).lines())
}

/// The adapter's description of hopper to the harness.
const ADAPTER_JSON: &str = include_str!("../../../bench/peer/adapter.json");

/// The first column of the first row of the adapter's statement `key`, run on its own
/// connection as the harness runs it, with the schema `hopper` put to the test's.
async fn adapter_sql<T>(db: &TestDatabase, key: &str) -> anyhow::Result<T>
where
    T: for<'a> tokio_postgres::types::FromSql<'a>,
{
    let adapter: serde_json::Value = serde_json::from_str(ADAPTER_JSON)?;
    let sql = adapter[key]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("adapter.json has no {key}"))?
        .replace("hopper.", &format!("{}.", db.schema()));
    let (client, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls).await?;
    let connection = tokio::spawn(connection);
    let value = client.query_one(&sql, &[]).await?.try_get(0)?;
    drop(client);
    connection.await??;
    Ok(value)
}

async fn unfinished(db: &TestDatabase) -> anyhow::Result<i64> {
    let s: QueueStats = db.queue_stats(QUEUE).await?;
    Ok(s.available + s.running + s.scheduled)
}

#[tokio::test]
async fn every_command_of_the_harness_contract() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    run(&db, &["setup"]).await?;

    // W1: 250 jobs, 100 per call.
    let out = run(&db, &["bulk", "250", "100"]).await?;
    assert!(elapsed(&out)? > 0.0);
    assert!(out.lines().any(|l| l.starts_with("API ")), "{out}");
    assert_eq!(db.queue_stats(QUEUE).await?.available, 250);
    assert_eq!(adapter_sql::<i64>(&db, "remaining_sql").await?, 250);
    assert!(adapter_sql::<bool>(&db, "any_left_sql").await?);

    // W3: T0 first, then the worker drains until SIGTERM, which it obeys.
    let mut worker = adapter(&db, &["worker-drain", "8"]).spawn()?;
    let mut lines = stdout_lines(&mut worker)?;
    let t0: f64 = line_starting(&mut lines, "T0 ").await?.trim().parse()?;
    assert!(t0 > 1.6e12, "T0 is epoch ms: {t0}");
    db.wait_for(QUEUE, LIMIT, |s| s.completed == 250)
        .await
        .map_err(anyhow::Error::msg)?;
    let pid = worker.id().ok_or_else(|| anyhow::anyhow!("no pid"))?;
    let killed = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .await?;
    assert!(killed.success());
    let status = tokio::time::timeout(LIMIT, worker.wait()).await??;
    assert!(status.success(), "worker-drain after SIGTERM: {status}");
    assert_eq!(unfinished(&db).await?, 0);
    assert!(!adapter_sql::<bool>(&db, "any_left_sql").await?);
    assert_eq!(adapter_sql::<i64>(&db, "remaining_sql").await?, 0);
    assert_eq!(adapter_sql::<i64>(&db, "total_sql").await?, 250);

    // W2: one at a time.
    let out = run(&db, &["single", "20"]).await?;
    assert!(elapsed(&out)? > 0.0);
    assert_eq!(db.queue_stats(QUEUE).await?.available, 20);
    Client::new(db.backend()).clear(Some(QUEUE)).await?;

    // W4: READY, then paced jobs carrying `t`, then LAT with one latency per job.
    let mut worker = adapter(&db, &["worker-latency", "8", "30"]).spawn()?;
    let mut lines = stdout_lines(&mut worker)?;
    line_starting(&mut lines, "READY").await?;
    let out = run(&db, &["enqueue-paced", "30", "300"]).await?;
    assert!(elapsed(&out)? >= 29.0 / 300.0, "paced at 300/s: {out}");
    let lat: Vec<f64> = serde_json::from_str(&line_starting(&mut lines, "LAT ").await?)?;
    assert_eq!(lat.len(), 30);
    assert!(lat.iter().all(|ms| (0.0..30_000.0).contains(ms)), "{lat:?}");
    let status = tokio::time::timeout(LIMIT, worker.wait()).await??;
    assert!(status.success(), "worker-latency: {status}");
    Ok(())
}

#[tokio::test]
async fn bad_arguments_are_refused_before_connecting() -> anyhow::Result<()> {
    for args in [
        &["bulk", "10"][..],
        &["single", "x"],
        &["worker-drain", "0"],
        &["nonsense"],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_hopper-bench-peer"))
            .args(args)
            .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
            .output()
            .await?;
        assert!(!output.status.success(), "{args:?} was accepted");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !stderr.contains("connecting"),
            "{args:?} tried to connect: {stderr}"
        );
    }
    Ok(())
}
