//! Helpers shared by the integration tests: a temporary directory per test (so each test
//! has its own database file), a backend on a file with a [`TestClock`], and fixtures.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use hopper_core::{
    Backend, ClaimParams, ClaimedJob, Finish, FinishResult, Lease, NewJob, NodeInfo, Outcome,
    TestClock,
};
use hopper_sqlite::{SqliteBackend, SqliteOptions};
use uuid::Uuid;

/// A directory under the system's temp dir, removed (with its contents) on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// A new empty directory.
    pub fn new() -> std::io::Result<Self> {
        let path = std::env::temp_dir()
            .join("hopper-sqlite-tests")
            .join(Uuid::now_v7().simple().to_string());
        std::fs::create_dir_all(&path)?;
        Ok(TempDir(path))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The database file tests use inside it.
    pub fn db(&self) -> PathBuf {
        self.0.join("hopper.db")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where every test clock starts: far from the wall clock, so a statement that reads the
/// wall clock instead of the backend's clock is caught.
pub fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2031, 3, 14, 9, 0, 0)
        .single()
        .expect("a valid instant")
}

/// A migrated backend on a fresh file, with a test clock at [`t0`].
pub struct Store {
    pub backend: SqliteBackend,
    pub clock: TestClock,
    pub node: NodeInfo,
    pub dir: TempDir,
}

impl Store {
    pub async fn new() -> anyhow::Result<Self> {
        let dir = TempDir::new()?;
        let clock = TestClock::new(t0());
        let backend = open(&dir.db(), &clock).await?;
        backend.migrate().await?;
        let node = node("tests");
        backend.node_heartbeat(&node).await?;
        Ok(Store {
            backend,
            clock,
            node,
            dir,
        })
    }

    /// Another backend on the same file (another "process": its own connections).
    pub async fn another(&self) -> anyhow::Result<SqliteBackend> {
        Ok(open(&self.dir.db(), &self.clock).await?)
    }

    pub fn advance(&self, by: Duration) {
        self.clock
            .advance(chrono::Duration::from_std(by).expect("a small duration"));
    }

    pub async fn insert(&self, job: NewJob) -> anyhow::Result<Uuid> {
        self.backend.job_insert(&job).await?;
        Ok(job.id)
    }

    pub async fn claim(&self, queue: &str, limit: u32) -> anyhow::Result<Vec<ClaimedJob>> {
        Ok(self
            .backend
            .job_claim(&ClaimParams {
                queue: queue.to_owned(),
                node: self.node.id,
                limit,
                lease: Duration::from_secs(30),
                kinds: None,
            })
            .await?)
    }

    pub async fn claim_one(&self, queue: &str) -> anyhow::Result<ClaimedJob> {
        let mut jobs = self.claim(queue, 1).await?;
        anyhow::ensure!(jobs.len() == 1, "expected one job, got {}", jobs.len());
        Ok(jobs.remove(0))
    }

    pub async fn finish(&self, lease: Lease, outcome: Outcome) -> anyhow::Result<FinishResult> {
        let results = self
            .backend
            .job_finish_many(&[Finish { lease, outcome }])
            .await?;
        anyhow::ensure!(results.len() == 1, "one result expected: {results:?}");
        Ok(results[0])
    }
}

/// A backend on `path` reading `clock`.
pub async fn open(path: &Path, clock: &TestClock) -> hopper_core::Result<SqliteBackend> {
    SqliteBackend::open(
        path,
        SqliteOptions {
            clock: Arc::new(clock.clone()),
            ..SqliteOptions::default()
        },
    )
    .await
}

/// A node description.
pub fn node(name: &str) -> NodeInfo {
    NodeInfo {
        id: Uuid::now_v7(),
        name: name.to_owned(),
        queues: vec!["default".to_owned()],
        concurrency: 4,
    }
}

/// A job of `kind` on `queue`.
pub fn job(kind: &str, queue: &str) -> NewJob {
    NewJob::new(kind, serde_json::json!({ "kind": kind })).with_queue(queue)
}
