//! Several processes on one database file: claims never overlap, migrations can race.
//!
//! The "processes" are real: the test binary runs itself again with [`CHILD_DB`] set, and
//! the `processes::child` test then acts as a separate worker process instead of a test.
//! Two backends inside one process (separate connections) are tested too.

use std::collections::{HashMap, HashSet};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{TempDir, another, harness};
use hopper_conformance::job;
use hopper_core::{Backend, ClaimParams, Finish, NewJob, Outcome};
use hopper_sqlite::{SqliteBackend, SqliteOptions};
use uuid::Uuid;

/// Set in a child process: the database file to work on.
const CHILD_DB: &str = "HOPPER_SQLITE_CHILD_DB";
/// Set in a child process: `migrate` or `claim`.
const CHILD_MODE: &str = "HOPPER_SQLITE_CHILD_MODE";

/// Claims (and completes) until the queue is empty, printing one line per claimed lease.
async fn claim_all(
    backend: &dyn Backend,
    batch: u32,
    out: &mut Vec<(Uuid, i32)>,
) -> anyhow::Result<()> {
    let node = Uuid::now_v7();
    loop {
        let jobs = backend
            .job_claim(&ClaimParams {
                queue: "q".into(),
                node,
                limit: batch,
                lease: Duration::from_secs(600),
                kinds: None,
            })
            .await?;
        if jobs.is_empty() {
            return Ok(());
        }
        let finishes: Vec<Finish> = jobs
            .iter()
            .map(|j| Finish {
                lease: j.lease,
                outcome: Outcome::Completed { duration_ms: 0 },
            })
            .collect();
        out.extend(jobs.iter().map(|j| (j.lease.job_id, j.lease.attempt)));
        backend.job_finish_many(&finishes).await?;
    }
}

/// Not a test of its own: the body of a child process (does nothing when run as a test).
#[tokio::test]
async fn child() -> anyhow::Result<()> {
    let (Ok(db), Ok(mode)) = (std::env::var(CHILD_DB), std::env::var(CHILD_MODE)) else {
        return Ok(());
    };
    let backend = SqliteBackend::open(&db, SqliteOptions::default()).await?;
    match mode.as_str() {
        "migrate" => {
            backend.migrate().await?;
        }
        "claim" => {
            start_together(&db).await?;
            let mut claimed = Vec::new();
            claim_all(&backend, 7, &mut claimed).await?;
            for (id, attempt) in claimed {
                println!("CLAIMED {id} {attempt}");
            }
        }
        other => anyhow::bail!("unknown child mode {other:?}"),
    }
    Ok(())
}

/// Waits until every claiming child is ready, so they claim at the same time however
/// slowly each one started: each leaves a file beside the database, then waits for
/// [`CLAIMERS`] of them.
async fn start_together(db: &str) -> anyhow::Result<()> {
    let dir = std::path::Path::new(db)
        .parent()
        .ok_or_else(|| anyhow::anyhow!("{db} has no directory"))?;
    std::fs::write(dir.join(format!("ready-{}", std::process::id())), b"")?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let ready = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("ready-"))
            .count();
        if ready >= CLAIMERS {
            return Ok(());
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the other claimer never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// How many claiming children run at once.
const CLAIMERS: usize = 2;

/// Runs `n` children in `mode` on `db` at once; returns each one's stdout.
async fn children(db: &std::path::Path, mode: &str, n: usize) -> anyhow::Result<Vec<String>> {
    let exe = std::env::current_exe()?;
    let mut spawned = Vec::new();
    for _ in 0..n {
        spawned.push(
            Command::new(&exe)
                .args([
                    "processes::child",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_DB, db)
                .env(CHILD_MODE, mode)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()?,
        );
    }
    let outputs = tokio::task::spawn_blocking(move || {
        spawned
            .into_iter()
            .map(|c| c.wait_with_output())
            .collect::<std::io::Result<Vec<_>>>()
    })
    .await??;
    let mut stdouts = Vec::new();
    for output in outputs {
        anyhow::ensure!(
            output.status.success(),
            "child failed: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        stdouts.push(String::from_utf8(output.stdout)?);
    }
    Ok(stdouts)
}

#[tokio::test]
async fn two_processes_migrate_a_fresh_file_at_once() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    children(&dir.db(), "migrate", 3).await?;
    let conn = rusqlite::Connection::open(dir.db())?;
    let versions: i64 =
        conn.query_row("SELECT count(*) FROM hopper_migrations", [], |r| r.get(0))?;
    assert_eq!(versions, hopper_sqlite::sql::MIGRATIONS.len() as i64);
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
    assert_eq!(mode, "wal");
    Ok(())
}

#[tokio::test]
async fn two_processes_claiming_never_get_the_same_job() -> anyhow::Result<()> {
    let h = harness().await?;
    const N: usize = 3000;
    let jobs: Vec<NewJob> = (0..N).map(|_| job("k", "q")).collect();
    h.backend.job_insert_many(&jobs).await?;

    let started = std::time::Instant::now();
    let outputs = children(&crate::common::db(&h), "claim", CLAIMERS).await?;
    let took = started.elapsed();
    let mut seen: HashMap<Uuid, usize> = HashMap::new();
    let mut per_child = Vec::new();
    for output in &outputs {
        let mut count = 0;
        // libtest may print "test child ... " on the line of the first claim.
        for line in output
            .lines()
            .filter_map(|l| l.split_once("CLAIMED ").map(|(_, rest)| rest))
        {
            let id: Uuid = line.split(' ').next().unwrap_or_default().parse()?;
            *seen.entry(id).or_default() += 1;
            count += 1;
        }
        per_child.push(count);
    }
    eprintln!(
        "{CLAIMERS} processes claimed and completed {N} jobs (batches of 7) in {took:?}, process start included; per process: {per_child:?}"
    );
    assert_eq!(seen.len(), N, "every job claimed");
    assert!(seen.values().all(|&n| n == 1), "a job was handed out twice");
    // How the jobs split between the processes is up to SQLite's file lock, which is not
    // fair (one process may take all of them on a loaded machine); only exactly-once is
    // guaranteed, and checked above.
    let stats = h.backend.queue_stats().await?;
    assert_eq!(stats[0].completed, N as i64);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_backends_claiming_concurrently_never_get_the_same_job() -> anyhow::Result<()> {
    let h = harness().await?;
    const N: usize = 3000;
    let jobs: Vec<NewJob> = (0..N).map(|_| job("k", "q")).collect();
    h.backend.job_insert_many(&jobs).await?;
    let backends: [Arc<dyn Backend>; 2] = [h.backend.clone(), Arc::new(another(&h).await?)];
    let started = std::time::Instant::now();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let backend = backends[i % 2].clone();
        tasks.push(tokio::spawn(async move {
            let mut claimed = Vec::new();
            claim_all(&*backend, 5, &mut claimed)
                .await
                .map(|()| claimed)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    let took = started.elapsed();
    eprintln!(
        "8 claimers on 2 backends claimed and completed {N} jobs (batches of 5) in {took:?}: {:.0} jobs/s",
        N as f64 / took.as_secs_f64()
    );
    let distinct: HashSet<Uuid> = all.iter().map(|(id, _)| *id).collect();
    assert_eq!(all.len(), N, "no job handed out twice");
    assert_eq!(distinct.len(), N, "every job claimed");
    Ok(())
}
