//! Stopping a runtime (`hopper worker`) with signals, as an orchestrator or an operator at
//! a terminal does: the first SIGTERM or SIGINT stops claiming and waits for the running
//! jobs (up to the runtime's `shutdown_timeout`, 30 s); a second one hands them back at
//! once, their attempt not counted, and the process exits.

use std::process::Command;
use std::time::{Duration, Instant};

use hopper::testing::TestDatabase;
use hopper::{Client, JobState, NewJob};

use crate::common::Hopper;

/// Sends `signal` (`TERM`, `INT`) to `pid` with kill(1).
fn signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()?;
    anyhow::ensure!(status.success(), "kill -{signal} {pid}: {status}");
    Ok(())
}

#[tokio::test]
async fn a_second_signal_hands_the_running_jobs_back_at_once() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = Client::new(db.backend());
    let queue = "stop_signals";
    let id = client
        .insert(NewJob::new("bench", serde_json::json!({"n": 1})).with_queue(queue))
        .await?;
    // Each job takes ten minutes: only a hand-back ends it.
    let mut worker = Hopper::start(
        &db,
        "",
        &["worker", "--queue", queue, "--work-ms", "600000"],
    )?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.job(id).await?.map(|job| job.state) != Some(JobState::Running) {
        anyhow::ensure!(Instant::now() < deadline, "the job never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let pid = worker.child.id();
    signal(pid, "TERM")?;
    worker.line_with("signal received", Duration::from_secs(10))?;
    let waiting = worker.line_with("running job", Duration::from_secs(10))?;
    assert!(
        waiting.contains("waiting up to 30s for 1 running job"),
        "{waiting}"
    );
    let first = Instant::now();
    signal(pid, "INT")?;
    let status = loop {
        if let Some(status) = worker.child.try_wait()? {
            break status;
        }
        anyhow::ensure!(
            first.elapsed() < Duration::from_secs(10),
            "the worker still runs {:?} after the second signal",
            first.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status}");

    let job = client.job(id).await?.expect("the job is kept");
    assert_eq!(job.state, JobState::Available, "handed back: {job:?}");
    assert_eq!(
        job.uncounted, job.attempt,
        "its attempt is not counted: {job:?}"
    );
    Ok(())
}
