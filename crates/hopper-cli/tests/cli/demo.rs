//! Two `hopper demo` processes at once on one database, SQLite and PostgreSQL: each runs,
//! counts and keeps its own jobs, in a queue of its own, and neither clears the other's
//! (the second run cleared the first one's waiting jobs, and each ran and counted the
//! other's).

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hopper::testing::TestDatabase;
use hopper::{Client, SqliteBackend, SqliteOptions};
use serde_json::Value;

use crate::common::TempDir;

/// The first demo's jobs: at 50 at once and 100 ms each, it runs for 4.8 s at least.
const FIRST: u64 = 2400;

/// The second demo's jobs, run while the first one still is.
const SECOND: u64 = 240;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_demos_at_once_on_one_sqlite_file_keep_to_their_own_jobs() -> anyhow::Result<()> {
    let dir = TempDir::new("two-demos")?;
    let path = dir.path().join("hopper.db");
    let env = [("DATABASE_URL", format!("sqlite://{}", path.display()))];
    let migrated = demo_command(&env, &["migrate"]).output()?;
    anyhow::ensure!(migrated.status.success(), "{migrated:?}");
    let backend = SqliteBackend::open(&path, SqliteOptions::default()).await?;
    two_demos_at_once(&env, &Client::new(Arc::new(backend))).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_demos_at_once_on_one_postgres_schema_keep_to_their_own_jobs() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let env = [
        ("DATABASE_URL", db.url().to_owned()),
        ("HOPPER_SCHEMA", db.schema().to_owned()),
    ];
    two_demos_at_once(&env, &Client::new(db.backend())).await
}

/// Starts a demo of [`FIRST`] jobs, and once its jobs are in, a demo of [`SECOND`] jobs,
/// which ends while the first still runs; then checks each one's summary and jobs.
async fn two_demos_at_once(env: &[(&str, String)], client: &Client) -> anyhow::Result<()> {
    let first_jobs = FIRST.to_string();
    let mut first = Running(Some(
        demo_command(env, &["--json", "demo", "--jobs", &first_jobs]).spawn()?,
    ));
    // The first demo's jobs are in, waiting: it has cleared what it would clear.
    let started = Instant::now();
    while !client
        .stats()
        .await?
        .iter()
        .any(|s| s.queue.starts_with("demo") && s.available + s.scheduled > 0)
    {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "the first demo enqueued nothing within 30 s"
        );
        anyhow::ensure!(first.still_running()?, "the first demo ended early");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let second_jobs = SECOND.to_string();
    let second = demo_command(env, &["--json", "demo", "--jobs", &second_jobs]).output()?;
    anyhow::ensure!(
        first.still_running()?,
        "the first demo ended before the second one did: they did not overlap"
    );
    let second = summary("the second demo", &second)?;
    let first = summary("the first demo", &first.finish()?)?;

    for (summary, jobs) in [(&first, FIRST), (&second, SECOND)] {
        let failed = jobs / 12;
        assert_eq!(
            summary["completed"].as_u64(),
            Some(jobs - failed),
            "{summary}"
        );
        assert_eq!(summary["failed"].as_u64(), Some(failed), "{summary}");
        assert_eq!(
            summary["attempts"].as_u64(),
            Some(jobs - failed + 3 * failed),
            "{summary}"
        );
    }
    assert_ne!(first["queue"], second["queue"]);
    // Both runs' jobs are still there, each in its own queue, all finished.
    let stats = client.stats().await?;
    for (summary, jobs) in [(&first, FIRST), (&second, SECOND)] {
        let queue = summary["queue"].as_str().unwrap_or_default();
        let s = stats
            .iter()
            .find(|s| s.queue == queue)
            .ok_or_else(|| anyhow::anyhow!("no jobs left in {queue}: {stats:?}"))?;
        assert_eq!(
            (s.completed, s.failed, s.available + s.scheduled + s.running),
            (
                i64::try_from(jobs - jobs / 12)?,
                i64::try_from(jobs / 12)?,
                0
            ),
            "{s:?}"
        );
    }
    Ok(())
}

/// A `hopper ARGS` command with `env`, its output piped.
fn demo_command(env: &[(&str, String)], args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hopper"));
    command
        .args(args)
        .env_remove("HOPPER_SCHEMA")
        .env_remove("HOPPER_LOG")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// A child process, killed if the test ends before it does.
struct Running(Option<Child>);

impl Running {
    /// Whether it has not ended yet.
    fn still_running(&mut self) -> std::io::Result<bool> {
        match &mut self.0 {
            Some(child) => Ok(child.try_wait()?.is_none()),
            None => Ok(false),
        }
    }

    /// Waits for its end; what it wrote.
    fn finish(&mut self) -> std::io::Result<std::process::Output> {
        match self.0.take() {
            Some(child) => child.wait_with_output(),
            None => Err(std::io::Error::other("already finished")),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The JSON summary of a demo that succeeded.
fn summary(what: &str, output: &std::process::Output) -> anyhow::Result<Value> {
    let stdout = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "{what} failed: {stdout} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(serde_json::from_str(stdout.trim())?)
}
