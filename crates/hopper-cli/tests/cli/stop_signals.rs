//! Stopping a runtime (`hopper worker`) with signals, as an orchestrator or an operator at
//! a terminal does: the first SIGTERM or SIGINT stops claiming and waits for the running
//! jobs (up to the runtime's `shutdown_timeout`, 30 s); a second one hands them back at
//! once, their attempt not counted, and the process exits.

use std::process::Command;
use std::time::{Duration, Instant};

use hopper::testing::TestDatabase;
use hopper::{Client, JobId, JobState, NewJob};

use crate::common::{Hopper, lock_the_jobs_table, wait_for_a_lock_wait};

/// Sends `signal` (`TERM`, `INT`) to `pid` with kill(1).
fn signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()?;
    anyhow::ensure!(status.success(), "kill -{signal} {pid}: {status}");
    Ok(())
}

/// A `hopper worker` serving `queue`, with one job that takes ten minutes running: only a
/// hand-back ends it.
async fn running_one_long_job(
    db: &TestDatabase,
    client: &Client,
    queue: &str,
) -> anyhow::Result<(Hopper, JobId)> {
    let id = client
        .insert(NewJob::new("bench", serde_json::json!({"n": 1})).with_queue(queue))
        .await?;
    let worker = Hopper::start(db, "", &["worker", "--queue", queue, "--work-ms", "600000"])?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.job(id).await?.map(|job| job.state) != Some(JobState::Running) {
        anyhow::ensure!(Instant::now() < deadline, "the job never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok((worker, id))
}

/// Waits for `worker` to exit, at most `limit`; it must exit successfully.
async fn exits_within(worker: &mut Hopper, limit: Duration) -> anyhow::Result<()> {
    let since = Instant::now();
    let status = loop {
        if let Some(status) = worker.child.try_wait()? {
            break status;
        }
        anyhow::ensure!(
            since.elapsed() < limit,
            "the worker still runs {:?} after the second signal",
            since.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    anyhow::ensure!(status.success(), "{status}");
    Ok(())
}

/// The job is available again, its attempt not counted.
async fn handed_back(client: &Client, id: JobId) -> anyhow::Result<()> {
    let job = client.job(id).await?.expect("the job is kept");
    assert_eq!(job.state, JobState::Available, "handed back: {job:?}");
    assert_eq!(
        job.uncounted, job.attempt,
        "its attempt is not counted: {job:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_second_signal_hands_the_running_jobs_back_at_once() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = Client::new(db.backend());
    let (mut worker, id) = running_one_long_job(&db, &client, "stop_signals").await?;

    let pid = worker.child.id();
    signal(pid, "TERM")?;
    worker.line_with("signal received", Duration::from_secs(10))?;
    let waiting = worker.line_with("running job", Duration::from_secs(10))?;
    assert!(
        waiting.contains("waiting up to 30s for 1 running job"),
        "{waiting}"
    );
    signal(pid, "INT")?;
    exits_within(&mut worker, Duration::from_secs(10)).await?;
    handed_back(&client, id).await
}

/// The first signal can come while the runtime's claim waits on the database (here on a
/// lock the test holds): the second one, sent while the claim still waits, is not lost.
#[tokio::test]
async fn a_second_signal_while_a_claim_waits_is_not_lost() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = Client::new(db.backend());
    let (mut worker, id) = running_one_long_job(&db, &client, "stop_signals_held").await?;

    let holder = lock_the_jobs_table(&db).await?;
    // The worker polls once a second; other statements may wait on the lock too.
    wait_for_a_lock_wait(&db, "%jobs_claim_idx%", "the worker's claim").await?;

    let pid = worker.child.id();
    signal(pid, "TERM")?;
    worker.line_with("running job", Duration::from_secs(10))?;
    signal(pid, "INT")?;
    worker.line_with("asked again to stop", Duration::from_secs(10))?;
    holder.batch_execute("COMMIT").await?;
    // Without the second signal the worker would wait 30 s for its running job.
    exits_within(&mut worker, Duration::from_secs(10)).await?;
    handed_back(&client, id).await
}
