//! A real crash: `hopper bench --workload drain` is killed with SIGKILL in the middle of a
//! drain, a second drain is started, and nothing is lost or completed twice.
//!
//! Runs against the real database (`HOPPER_TEST_DATABASE_URL`, else `DATABASE_URL`, else
//! the local PostgreSQL) in a schema of its own.

use std::process::{Output, Stdio};
use std::time::Duration;

use hopper::testing::TestDatabase;
use hopper::{Client, JobListParams, JobRecord, JobState, NewJob};
use tokio::process::{Child, Command};

const JOBS: usize = 2_000;

/// `hopper bench --workload drain` on the test's schema: 16 at once, 50 ms per job, a
/// 2 s timeout (and lease). The killed drain's jobs come back as soon as the second drain's
/// rescuer finds the killed node's liveness lock free (or, at the latest, in 2 s).
fn drain(db: &TestDatabase) -> std::io::Result<Child> {
    Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args([
            "--database-url",
            db.url(),
            "--schema",
            db.schema(),
            "--json",
        ])
        .args(["bench", "--workload", "drain", "--work-ms", "50"])
        .args(["--job-timeout", "2s", "--concurrency", "16"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
}

async fn bench_jobs(client: &Client) -> hopper::Result<Vec<JobRecord>> {
    client
        .jobs(&JobListParams {
            queue: Some("bench".to_owned()),
            limit: (JOBS * 2) as u32,
            ..JobListParams::default()
        })
        .await
}

fn describe(output: &Output) -> String {
    format!(
        "status {}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test]
async fn a_drain_killed_with_sigkill_loses_nothing_and_completes_nothing_twice()
-> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = Client::new(db.backend());
    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|n| NewJob::new("bench", serde_json::json!({ "n": n })).with_queue("bench"))
        .collect();
    client.insert_many(&jobs).await?;

    // Kill the first drain once it has finished some jobs and holds others.
    let mut first = drain(&db)?;
    let seen = db
        .wait_for("bench", Duration::from_secs(20), |s| {
            s.completed >= 100 && s.running > 0
        })
        .await;
    if let Err(e) = seen {
        first.kill().await?;
        let output = first.wait_with_output().await?;
        anyhow::bail!(
            "the first drain never got going: {e}\n{}",
            describe(&output)
        );
    }
    first.kill().await?; // SIGKILL, then reaps it
    // A claim or an outcome it had sent still runs, and commits, without it: wait for those
    // before reading what it left (a claim landing after the read would lease a job this
    // test takes for untouched).
    db.settle(Duration::from_secs(10))
        .await
        .map_err(anyhow::Error::msg)?;
    let running_at_kill: Vec<JobRecord> = bench_jobs(&client)
        .await?
        .into_iter()
        .filter(|j| j.state == JobState::Running)
        .collect();
    assert!(
        !running_at_kill.is_empty(),
        "no job was running at the kill"
    );
    // Concurrency 16 plus the default prefetch (for 50 ms jobs, its floor: twice as many,
    // claimed ahead of free slots; the claims in flight ask only for what is missing from
    // both together), plus jobs that had finished but whose outcome the completer had not
    // written yet (they still read as running): a loaded machine showed more than 48. A
    // prefetch that hoarded a claim batch would show about a thousand.
    assert!(
        running_at_kill.len() <= 64,
        "more claimed than the concurrency and the prefetch: {}",
        running_at_kill.len()
    );

    // A second drain finishes the work, the killed one's jobs included.
    let second = drain(&db)?;
    let output = tokio::time::timeout(Duration::from_secs(25), second.wait_with_output())
        .await
        .map_err(|_| anyhow::anyhow!("the second drain did not finish within 25 s"))??;
    assert!(
        output.status.success(),
        "second drain failed: {}",
        describe(&output)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    assert_eq!(report["workload"], "drain", "{report}");

    let all = bench_jobs(&client).await?;
    assert_eq!(all.len(), JOBS);
    for job in &all {
        assert_eq!(job.state, JobState::Completed, "{job:?}");
        // Completed exactly once: every attempt before the last one failed.
        assert_eq!(job.errors.len() as i32, job.attempt - 1, "{job:?}");
    }
    for held in &running_at_kill {
        let job = all
            .iter()
            .find(|j| j.id == held.id)
            .ok_or_else(|| anyhow::anyhow!("job {} vanished", held.id))?;
        // A completion statement sent just before the kill may still commit after it:
        // PostgreSQL runs a received statement even if its client is gone.
        if job.attempt == held.attempt && job.errors.is_empty() {
            continue;
        }
        assert!(job.attempt > held.attempt, "{job:?}");
        let first_error = &job.errors[0];
        assert_eq!(first_error.attempt, held.attempt, "{job:?}");
        assert!(
            first_error.error.contains("lease expired")
                || first_error.error.contains("stopped heartbeating")
                || first_error.error.contains("vanished"),
            "unexpected error history: {:?}",
            job.errors
        );
    }
    let untouched = all
        .iter()
        .filter(|j| !running_at_kill.iter().any(|r| r.id == j.id));
    for job in untouched {
        assert_eq!(job.attempt, 1, "{job:?}");
    }
    Ok(())
}
