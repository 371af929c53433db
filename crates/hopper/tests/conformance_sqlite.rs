//! The storage conformance suite (`hopper-conformance`) run against SQLite: every case gets
//! its own database file in a temporary directory, migrated, whose backend reads a
//! [`TestClock`].

use std::path::PathBuf;
use std::sync::Arc;

use hopper::backend::Backend;
use hopper::{SqliteBackend, SqliteOptions, TestClock};
use hopper_conformance::{Harness, conformance_suite};

/// A directory of its own under the system's temp dir, removed with its files on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn sqlite() -> anyhow::Result<Harness> {
    let dir = TempDir(
        std::env::temp_dir()
            .join("hopper-conformance-sqlite")
            .join(uuid::Uuid::now_v7().simple().to_string()),
    );
    std::fs::create_dir_all(&dir.0)?;
    let clock = TestClock::new(hopper_conformance::t0());
    let backend = SqliteBackend::open(
        dir.0.join("hopper.db"),
        SqliteOptions {
            clock: Arc::new(clock.clone()),
            ..SqliteOptions::default()
        },
    )
    .await?;
    backend.migrate().await?;
    Harness::new(Arc::new(backend), clock, dir).await
}

conformance_suite!(sqlite);
