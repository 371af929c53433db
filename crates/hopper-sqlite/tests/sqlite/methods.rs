//! What only the SQLite backend does, against a real SQLite file, one file per test:
//! wake-ups within one process, its migrations, table prefixes, in-memory databases. The
//! seam's behaviour is checked by the conformance suite (`hopper-conformance`, run from
//! `conformance.rs`).

use std::time::Duration;

use crate::common::{TempDir, harness};
use futures_util::StreamExt;
use hopper_conformance::{job, secs, t0};
use hopper_core::backend::{JobCancelParams, JobGetParams};
use hopper_core::{Backend, Error, JobState, NewJob, TestClock, Wakeup};
use hopper_sqlite::{SqliteBackend, SqliteOptions};
use serde_json::json;

#[tokio::test]
async fn subscribers_hear_this_processes_inserts_and_cancels() -> anyhow::Result<()> {
    let h = harness().await?;
    let mut wakeups = h.backend.subscribe().await?;
    h.insert(job("k", "later").with_run_at(t0() + secs(60)))
        .await?;
    let id = h.insert(job("k", "now")).await?;
    h.backend
        .job_insert_many(&[job("k", "bulk"), job("k", "bulk")])
        .await?;
    h.backend.job_cancel(&JobCancelParams { id }).await?;
    for expected in [
        Wakeup::Jobs("now".into()),
        Wakeup::Jobs("bulk".into()),
        Wakeup::Cancelled(id),
    ] {
        let got = tokio::time::timeout(Duration::from_secs(5), wakeups.next()).await?;
        assert_eq!(got, Some(expected));
    }
    Ok(())
}

/// Running the migrations twice is a conformance case (`migrate_twice_is_a_no_op`); this is
/// the refusal of a file migrated by a newer hopper.
#[tokio::test]
async fn migrate_refuses_a_newer_schema() -> anyhow::Result<()> {
    let h = harness().await?;
    {
        let conn = rusqlite::Connection::open(crate::common::db(&h))?;
        conn.execute(
            "INSERT INTO hopper_migrations (version, name, applied_at) VALUES (999, 'future', 0)",
            [],
        )?;
    }
    match h.backend.migrate().await {
        Err(Error::Schema(message)) => assert!(message.contains("999"), "{message}"),
        other => panic!("expected a schema error, got {other:?}"),
    }
    Ok(())
}

/// The check of the processes that run jobs without migrating: a migrated file passes,
/// one migrated by a newer hopper and one never migrated are refused, and nothing is
/// written (the file is still not migrated afterwards).
#[tokio::test]
async fn schema_check_refuses_newer_and_unmigrated_files() -> anyhow::Result<()> {
    let h = harness().await?;
    h.backend.schema_check().await?;
    {
        let conn = rusqlite::Connection::open(crate::common::db(&h))?;
        conn.execute(
            "INSERT INTO hopper_migrations (version, name, applied_at) VALUES (999, 'future', 0)",
            [],
        )?;
    }
    match h.backend.schema_check().await {
        Err(Error::Schema(message)) => assert!(message.contains("999"), "{message}"),
        other => panic!("expected a schema error, got {other:?}"),
    }
    let dir = TempDir::new()?;
    let fresh = SqliteBackend::open(dir.db(), SqliteOptions::default()).await?;
    for _ in 0..2 {
        match fresh.schema_check().await {
            Err(Error::Schema(message)) => {
                assert!(message.contains("hopper migrate"), "{message}")
            }
            other => panic!("expected a schema error, got {other:?}"),
        }
    }
    Ok(())
}

/// Opened with `create_if_missing(false)`, a missing file is `NotFound` naming it, and
/// nothing is created (no database file, no WAL beside it, no directory); an existing
/// file opens as before. The default still creates it.
#[tokio::test]
async fn a_missing_file_is_refused_without_being_created_when_asked() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let refusing = SqliteOptions::default().with_create_if_missing(false);
    let nested = dir.path().join("no-such-dir").join("hopper.db");
    for path in [dir.db(), nested] {
        let url = format!("sqlite://{}", path.display());
        for opened in [
            SqliteBackend::open(&path, refusing.clone()).await,
            SqliteBackend::connect(&url, refusing.clone()).await,
        ] {
            match opened {
                Err(Error::NotFound(message)) => {
                    assert!(message.contains(&path.display().to_string()), "{message}");
                    assert!(message.contains("does not exist"), "{message}");
                    assert!(message.contains("hopper migrate"), "{message}");
                }
                other => panic!("expected NotFound for {path:?}, got {other:?}"),
            }
        }
        assert_eq!(
            std::fs::read_dir(dir.path())?.count(),
            0,
            "nothing was created"
        );
    }
    let created = SqliteBackend::open(dir.db(), SqliteOptions::default()).await?;
    created.migrate().await?;
    drop(created);
    let existing = SqliteBackend::open(dir.db(), refusing).await?;
    existing.schema_check().await?;
    existing.job_insert(&job("k", "q")).await?;
    assert_eq!(existing.queue_stats().await?.len(), 1);
    Ok(())
}

#[tokio::test]
async fn prefixes_keep_two_instances_apart_in_one_file() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let open =
        |prefix: &str| SqliteBackend::open(dir.db(), SqliteOptions::default().with_prefix(prefix));
    let one = open("hopper").await?;
    let two = open("other").await?;
    one.migrate().await?;
    two.migrate().await?;
    one.job_insert(&job("k", "q")).await?;
    assert_eq!(one.queue_stats().await?.len(), 1);
    assert!(two.queue_stats().await?.is_empty());
    assert!(matches!(
        open("Bad-Prefix").await,
        Err(Error::InvalidInput(_))
    ));
    Ok(())
}

#[tokio::test]
async fn in_memory_database_works_alone() -> anyhow::Result<()> {
    let clock = TestClock::new(t0());
    let backend = SqliteBackend::connect(
        "sqlite::memory:",
        SqliteOptions::default().with_clock(std::sync::Arc::new(clock)),
    )
    .await?;
    backend.migrate().await?;
    let j = NewJob::new("k", json!({}));
    let id = j.id;
    backend.job_insert(&j).await?;
    assert_eq!(
        backend
            .job_get(&JobGetParams { id })
            .await?
            .map(|r| r.state),
        Some(JobState::Available)
    );
    assert_eq!(backend.queue_stats().await?[0].available, 1);
    Ok(())
}

#[tokio::test]
async fn an_unmigrated_file_says_to_migrate() -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let backend = SqliteBackend::open(dir.db(), SqliteOptions::default()).await?;
    match backend.queue_stats().await {
        Err(Error::Schema(message)) => assert!(message.contains("hopper migrate"), "{message}"),
        other => panic!("expected a schema error, got {other:?}"),
    }
    Ok(())
}

/// A statement SQLite refuses for a reason that waiting will not cure (here a trigger the
/// application added, which raises) is `Error::Refused` with SQLite's words, not a
/// transient error that the runtime would retry for ever.
#[tokio::test]
async fn a_trigger_that_raises_is_refused_not_transient() -> anyhow::Result<()> {
    let h = harness().await?;
    let conn = rusqlite::Connection::open(crate::common::db(&h))?;
    conn.execute_batch(
        "CREATE TRIGGER no_jobs BEFORE INSERT ON hopper_jobs
         BEGIN SELECT RAISE(ABORT, 'no jobs on fridays'); END;",
    )?;
    drop(conn);
    let err = h
        .insert(job("k", "refused"))
        .await
        .expect_err("the trigger refuses every insert");
    let err = err.downcast::<Error>()?;
    assert!(matches!(err, Error::Refused(_)), "{err:?}");
    assert!(!err.is_transient());
    assert!(err.to_string().contains("no jobs on fridays"), "{err}");
    Ok(())
}
