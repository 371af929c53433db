//! Migrations on PostgreSQL: idempotent, safe to run concurrently on a fresh schema, and
//! refusing a schema newer than this build. (Running them twice on one store is also a
//! conformance case.)

use std::sync::Arc;

use crate::support::{SchemaGuard, connect, fresh_schema_name};
use hopper::backend::{Backend, JobGetParams};
use hopper::testing::{TestDatabase, database_url};
use hopper::{Error, PgBackend, PgOptions, SystemClock};

async fn backend_on(schema: &str) -> anyhow::Result<PgBackend> {
    Ok(PgBackend::connect(
        &database_url(),
        PgOptions::default()
            .with_schema(schema)
            .with_pool_size(2)
            .with_clock(Arc::new(SystemClock)),
    )
    .await?)
}

/// (number of rows, highest version) of the schema's migrations table.
async fn versions(schema: &str) -> anyhow::Result<(i64, i32)> {
    let client = connect(&database_url()).await?;
    let row = client
        .query_one(
            &format!("SELECT count(*), max(version) FROM {schema}.migrations"),
            &[],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

/// When each migration was applied, as text.
async fn applied_at(schema: &str) -> anyhow::Result<String> {
    let client = connect(&database_url()).await?;
    let sql =
        format!("SELECT array_agg(applied_at ORDER BY version)::text FROM {schema}.migrations");
    Ok(client.query_one(&sql, &[]).await?.get(0))
}

fn known_version() -> i32 {
    hopper_postgres::sql::MIGRATIONS.last().map_or(0, |m| m.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_migrations_on_a_fresh_schema_all_succeed() -> anyhow::Result<()> {
    let schema = fresh_schema_name("test_migrate");
    let _guard = SchemaGuard {
        url: database_url(),
        schema: schema.clone(),
    };
    let mut backends = Vec::new();
    for _ in 0..4 {
        backends.push(backend_on(&schema).await?);
    }
    // Start them together: every task waits at the barrier, then migrates.
    let barrier = Arc::new(tokio::sync::Barrier::new(backends.len()));
    let tasks: Vec<_> = backends
        .into_iter()
        .map(|backend| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                backend.migrate().await
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    let known = known_version();
    assert_eq!(versions(&schema).await?, (i64::from(known), known));
    // The schema works.
    let backend = backend_on(&schema).await?;
    let job = hopper::NewJob::new("k", serde_json::json!({}));
    backend.job_insert(&job).await?;
    assert!(
        backend
            .job_get(&JobGetParams { id: job.id })
            .await?
            .is_some()
    );
    Ok(())
}

#[tokio::test]
async fn migrating_a_migrated_schema_again_changes_nothing() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let before = versions(db.schema()).await?;
    let stamps = applied_at(db.schema()).await?;
    let a = db.backend();
    let b = db.backend();
    let (ra, rb) = tokio::join!(a.migrate(), b.migrate());
    ra?;
    rb?;
    assert_eq!(versions(db.schema()).await?, before);
    assert_eq!(
        applied_at(db.schema()).await?,
        stamps,
        "no migration re-applied"
    );
    Ok(())
}

/// Records in `db`'s schema a migration one past what this build knows, as a newer
/// hopper would have; returns its version.
async fn record_a_newer_migration(db: &TestDatabase) -> anyhow::Result<i32> {
    let future = known_version() + 1;
    connect(db.url())
        .await?
        .execute(
            &format!(
                "INSERT INTO {}.migrations (version, name) VALUES ($1, 'from_the_future')",
                db.schema()
            ),
            &[&future],
        )
        .await?;
    Ok(future)
}

#[tokio::test]
async fn a_schema_newer_than_this_build_is_refused() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let future = record_a_newer_migration(&db).await?;
    match db.backend().migrate().await {
        Err(Error::Schema(message)) => {
            assert!(message.contains(&future.to_string()), "{message}");
            assert!(message.contains("upgrade hopper"), "{message}");
        }
        other => panic!("expected Error::Schema, got {other:?}"),
    }
    Ok(())
}

/// The check of the processes that run jobs without migrating: a migrated schema passes,
/// one migrated by a newer hopper and one never migrated are refused, and nothing is
/// created (the unmigrated schema is still absent afterwards).
#[tokio::test]
async fn schema_check_refuses_newer_and_unmigrated_schemas() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    db.backend().schema_check().await?;
    record_a_newer_migration(&db).await?;
    match db.backend().schema_check().await {
        Err(Error::Schema(message)) => assert!(message.contains("upgrade hopper"), "{message}"),
        other => panic!("expected Error::Schema, got {other:?}"),
    }

    let unborn = fresh_schema_name("check");
    let _guard = SchemaGuard {
        url: database_url(),
        schema: unborn.clone(),
    };
    let backend = backend_on(&unborn).await?;
    match backend.schema_check().await {
        Err(Error::Schema(message)) => assert!(message.contains("hopper migrate"), "{message}"),
        other => panic!("expected Error::Schema, got {other:?}"),
    }
    let exists = connect(db.url())
        .await?
        .query_one(
            "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
            &[&unborn],
        )
        .await?
        .get::<_, i64>(0);
    assert_eq!(exists, 0, "the check created the schema");
    Ok(())
}

#[tokio::test]
async fn an_invalid_schema_name_is_refused_before_connecting() -> anyhow::Result<()> {
    for bad in [
        "Upper",
        "semi;colon",
        "1digit",
        "quo\"te",
        "",
        "information_schema",
        "pg_temp",
        "pg_catalog",
    ] {
        match backend_on(bad).await {
            Err(e) => assert!(
                matches!(e.downcast_ref(), Some(Error::InvalidInput(_))),
                "{bad:?}: {e}"
            ),
            Ok(_) => panic!("schema {bad:?} accepted"),
        }
    }
    Ok(())
}

/// A schema name that passes the character check but that PostgreSQL's parser reads as a
/// key word (reserved, or taken as a column name but not as a type's schema) is refused
/// when the backend connects, naming the word, and nothing is created; an unreserved key
/// word is an ordinary name and works.
#[tokio::test]
async fn a_schema_name_postgresql_reads_as_a_key_word_is_refused() -> anyhow::Result<()> {
    let client = connect(&database_url()).await?;
    for word in ["select", "user", "left", "time", "between"] {
        match backend_on(word).await {
            Err(e) => match e.downcast_ref() {
                Some(Error::InvalidInput(message)) => {
                    assert!(message.contains("key word"), "{word}: {message}");
                    assert!(message.contains(&format!("{word:?}")), "{word}: {message}");
                }
                _ => panic!("{word:?}: expected invalid input, got {e}"),
            },
            Ok(backend) => {
                let migrated = backend.migrate().await;
                panic!("schema {word:?} accepted (its migration: {migrated:?})");
            }
        }
        let exists: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_namespace WHERE nspname = $1",
                &[&word],
            )
            .await?
            .get(0);
        assert_eq!(exists, 0, "schema {word:?} was created");
    }
    // `abort` is a key word that PostgreSQL takes as a name anywhere.
    let _guard = SchemaGuard {
        url: database_url(),
        schema: "abort".to_owned(),
    };
    let backend = backend_on("abort").await?;
    backend.migrate().await?;
    backend
        .job_insert(&hopper::NewJob::new("k", serde_json::json!({})))
        .await?;
    Ok(())
}
