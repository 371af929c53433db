//! Helpers shared by the integration tests: a temporary directory per test (so each test
//! has its own database file), and the conformance suite's [`Harness`] on a file in it,
//! whose backend reads the harness's [`TestClock`].

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::future::BoxFuture;
use hopper_conformance::{Harness, JobHold, t0};
use hopper_core::{Backend, JobId, TestClock};
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

/// A migrated backend on a fresh file, in the conformance suite's harness (clock at
/// [`t0`], a registered node); the harness keeps the file's [`TempDir`] (see [`db`]).
pub async fn harness() -> anyhow::Result<Harness> {
    let dir = TempDir::new()?;
    let clock = TestClock::new(t0());
    let backend = open(&dir.db(), &clock).await?;
    backend.migrate().await?;
    Ok(Harness::new(Arc::new(backend), clock, dir)
        .await?
        .with_job_holds(hold_job))
}

/// Holds a job's row for the conformance cases that hold one. SQLite has no row locks: the
/// nearest an application comes to holding a row is a transaction that read it and stays
/// open, which does not stop a writer (the file is in WAL mode).
fn hold_job(h: &Harness, id: JobId) -> BoxFuture<'_, anyhow::Result<JobHold>> {
    Box::pin(async move {
        let conn = rusqlite::Connection::open(db(h))?;
        conn.execute_batch("BEGIN")?;
        conn.query_row(
            "SELECT 1 FROM hopper_jobs WHERE id = ?1",
            [id.hyphenated().to_string()],
            |_| Ok(()),
        )?;
        Ok(JobHold::new(async move {
            conn.execute_batch("COMMIT")?;
            Ok(())
        }))
    })
}

/// The database file of a [`harness`].
pub fn db(h: &Harness) -> PathBuf {
    h.store::<TempDir>()
        .expect("a harness made by common::harness")
        .db()
}

/// Another backend on the file of a [`harness`] (another "process": its own connections).
pub async fn another(h: &Harness) -> anyhow::Result<SqliteBackend> {
    Ok(open(&db(h), &h.clock).await?)
}

/// A backend on `path` reading `clock`.
pub async fn open(path: &Path, clock: &TestClock) -> hopper_core::Result<SqliteBackend> {
    SqliteBackend::open(
        path,
        SqliteOptions::default().with_clock(Arc::new(clock.clone())),
    )
    .await
}
