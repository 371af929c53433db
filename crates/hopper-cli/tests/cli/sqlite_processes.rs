//! Two processes on one SQLite file (issue 5): `hopper bench --workload drain` runs jobs
//! while `hopper enqueue`, started once per job in a loop, adds them; every job finishes
//! exactly once.
//!
//! A job scheduled an hour ahead keeps the drain alive (it exits when no bench job is
//! unfinished) until the loop is over; `hopper jobs cancel` then lets it finish. The
//! loop goes on only once the drain has completed its first job, so the two processes
//! really overlap.

use std::collections::BTreeSet;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use hopper::{Client, JobListParams, JobState, SqliteBackend, SqliteOptions};
use tokio::process::Command;

use crate::common::TempDir;

/// Jobs the loop enqueues, one `hopper enqueue` process each.
const JOBS: u64 = 100;

fn hopper(url: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hopper"));
    command
        .args(["--database-url", url])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// The stdout of a process that succeeded, or an error with everything it said.
fn succeeded(what: &str, output: Output) -> anyhow::Result<String> {
    let said = |bytes: &[u8]| String::from_utf8_lossy(bytes).trim().to_owned();
    anyhow::ensure!(
        output.status.success(),
        "{what} ended with {}; it said:\n{}\n{}",
        output.status,
        said(&output.stdout),
        said(&output.stderr)
    );
    Ok(said(&output.stdout))
}

/// Runs `hopper <args>` to the end; its stdout.
async fn run(url: &str, args: &[&str]) -> anyhow::Result<String> {
    let output = hopper(url).args(args).output().await?;
    succeeded(&format!("hopper {args:?}"), output)
}

/// `hopper enqueue` of bench job `n`; its id.
async fn enqueue(url: &str, n: u64, extra: &[&str]) -> anyhow::Result<uuid::Uuid> {
    let args = format!(r#"{{"n": {n}}}"#);
    let mut all = vec![
        "enqueue", "--queue", "bench", "--kind", "bench", "--args", &args,
    ];
    all.extend_from_slice(extra);
    Ok(run(url, &all).await?.parse()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_and_an_enqueue_loop_on_one_file_run_every_job_exactly_once() -> anyhow::Result<()>
{
    let dir = TempDir::new("sqlite-processes")?;
    let url = format!("sqlite://{}", dir.0.join("hopper.db").display());
    run(&url, &["migrate"]).await?;
    let keeper = enqueue(&url, 0, &["--delay", "1h"]).await?;
    let started = Instant::now();
    let drain = hopper(&url)
        .args([
            "--json",
            "bench",
            "--workload",
            "drain",
            "--concurrency",
            "8",
        ])
        .spawn()?;

    // The test reads the file as a third party, through its own backend.
    let backend = SqliteBackend::open(dir.0.join("hopper.db"), SqliteOptions::default()).await?;
    let client = Client::new(std::sync::Arc::new(backend));
    let first = enqueue(&url, 1, &[]).await?;
    while client.job(first).await?.map(|j| j.state) != Some(JobState::Completed) {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "the drain did not complete the first job within 30 s"
        );
        // Another process's write to the file: polling is the only signal there is.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for n in 2..=JOBS {
        enqueue(&url, n, &[]).await?;
    }
    run(&url, &["jobs", "cancel", &keeper.to_string()]).await?;
    let output = tokio::time::timeout(Duration::from_secs(60), drain.wait_with_output())
        .await
        .map_err(|_| anyhow::anyhow!("the drain did not end within 60 s of the last enqueue"))??;
    succeeded("the drain", output)?;
    eprintln!(
        "{JOBS} jobs enqueued by {JOBS} processes while a drain ran, in {:?}",
        started.elapsed()
    );

    let jobs = client
        .jobs(&JobListParams {
            queue: Some("bench".to_owned()),
            limit: 1000,
            ..JobListParams::default()
        })
        .await?;
    let mut numbers = BTreeSet::new();
    for job in &jobs {
        if job.id == keeper {
            assert_eq!(job.state, JobState::Cancelled);
            continue;
        }
        assert_eq!(job.state, JobState::Completed, "{job:?}");
        // One claim each: no lease expired, so none may have run twice.
        assert_eq!((job.attempt, job.uncounted), (1, 0), "{job:?}");
        assert!(job.errors.is_empty(), "{job:?}");
        let n = job.args["n"].as_u64().unwrap_or_default();
        assert!(numbers.insert(n), "job number {n} appears twice");
    }
    assert_eq!(numbers, (1..=JOBS).collect::<BTreeSet<u64>>());
    assert_eq!(jobs.len() as u64, JOBS + 1);
    Ok(())
}
