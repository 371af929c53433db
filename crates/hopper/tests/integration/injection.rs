//! SQL injection through every string a caller of the library passes in: queue, kind,
//! group, unique key, arguments, periodic job names, list filters and queue settings, on
//! PostgreSQL and on SQLite. Each hostile string is either refused with a clear
//! `InvalidInput` naming the field, or stored and read back verbatim; afterwards every
//! table is intact and the jobs written before still work.

use std::sync::Arc;

use hopper::backend::Backend;
use hopper::testing::TestDatabase;
use hopper::{Client, Error, JobListParams, JobState, NewJob, SqliteBackend};
use serde_json::json;

/// Strings that would change a statement if it were built by pasting text.
const HOSTILE: [&str; 8] = [
    "default' OR '1'='1",
    "'; DROP TABLE jobs; --",
    "x\"; DELETE FROM jobs; --",
    "k) OR (1=1",
    "%' OR 1=1 --",
    "\\'; SELECT pg_sleep(10); --",
    "a'||(SELECT current_user)||'",
    "default; DROP SCHEMA public CASCADE",
];

fn assert_invalid<T: std::fmt::Debug>(result: hopper::Result<T>, field: &str, input: &str) {
    match result {
        Err(Error::InvalidInput(m)) => assert!(m.contains(field), "{input:?}: {m}"),
        other => panic!("{field} {input:?}: expected InvalidInput, got {other:?}"),
    }
}

/// Every string input of the client, against `backend`.
async fn hostile_inputs_are_harmless(backend: Arc<dyn Backend>) -> anyhow::Result<()> {
    let client = Client::new(backend.clone());
    let canary = client
        .insert(NewJob::new("canary", json!({"keep": true})).with_queue("safe"))
        .await?;
    let mut stored = 0;
    for s in HOSTILE {
        let job = || NewJob::new("k", json!({}));
        // Names are refused before anything reaches SQL.
        assert_invalid(client.insert(job().with_queue(s)).await, "queue", s);
        assert_invalid(client.insert(NewJob::new(s, json!({}))).await, "kind", s);
        assert_invalid(client.insert(job().with_group(s)).await, "group", s);
        assert_invalid(
            client.insert_many(&[job(), job().with_queue(s)]).await,
            "queue",
            s,
        );
        assert_invalid(client.pause(s).await, "queue", s);
        assert_invalid(client.limit(s, Some(1), None).await, "queue", s);
        assert_invalid(
            hopper::PeriodicJob::new(s, "* * * * *", job()).map(|_| ()),
            "periodic job",
            s,
        );
        // Filters: refused, or they match nothing.
        for params in [
            JobListParams {
                queue: Some(s.to_owned()),
                limit: 10,
                ..JobListParams::default()
            },
            JobListParams {
                kind: Some(s.to_owned()),
                limit: 10,
                ..JobListParams::default()
            },
        ] {
            match client.jobs(&params).await {
                Ok(jobs) => assert!(jobs.is_empty(), "{s:?} matched {jobs:?}"),
                Err(e) => assert!(matches!(e, Error::InvalidInput(_)), "{s:?}: {e}"),
            }
        }
        match client.clear(Some(s)).await {
            Ok(n) => assert_eq!(n, 0, "{s:?}"),
            Err(e) => assert!(matches!(e, Error::InvalidInput(_)), "{s:?}: {e}"),
        }
        // Unique keys and arguments may hold any text: stored and read back verbatim.
        let id = client
            .insert(
                NewJob::new("k", json!({"s": s, s: [s]}))
                    .with_queue("keys")
                    .with_unique_key(s),
            )
            .await?;
        stored += 1;
        let back = client
            .job(id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("{s:?}: job gone"))?;
        assert_eq!(back.unique_key.as_deref(), Some(s));
        assert_eq!(back.args, json!({"s": s, s: [s]}));
        // The key is taken by exactly that job: a second insert is ignored, not doubled.
        client
            .insert(NewJob::new("k", json!({})).with_unique_key(s))
            .await?;
    }
    // Everything is intact: the canary, every stored job, and the tables still work.
    let canary = client
        .job(canary)
        .await?
        .ok_or_else(|| anyhow::anyhow!("canary gone"))?;
    assert_eq!(canary.state, JobState::Available);
    assert_eq!(canary.args, json!({"keep": true}));
    let stats = client.stats().await?;
    let keys = stats.iter().find(|s| s.queue == "keys");
    assert_eq!(keys.map(|k| k.available), Some(stored));
    assert_eq!(
        stats.iter().map(|s| s.available).sum::<i64>(),
        stored + 1,
        "{stats:?}"
    );
    client.pause("safe").await?;
    client.resume("safe").await?;
    Ok(())
}

#[tokio::test]
async fn hostile_strings_are_harmless_on_postgres() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    hostile_inputs_are_harmless(db.backend()).await?;
    // Every table of the schema is still there, and nothing was created outside it.
    let (pg, conn) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    let tables: Vec<String> = pg
        .query(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = $1 AND table_type = 'BASE TABLE' ORDER BY 1",
            &[&db.schema()],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for table in ["cron_jobs", "jobs", "nodes", "queues"] {
        assert!(
            tables.iter().any(|t| t == table),
            "{table} missing: {tables:?}"
        );
    }
    let public: i64 = pg
        .query_one(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = 'public'",
            &[],
        )
        .await?
        .get(0);
    assert_eq!(public, 1, "the public schema is still there");
    Ok(())
}

#[tokio::test]
async fn hostile_strings_are_harmless_on_sqlite() -> anyhow::Result<()> {
    let dir = std::env::temp_dir()
        .join("hopper-injection")
        .join(uuid::Uuid::now_v7().simple().to_string());
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("hopper.db");
    let result = async {
        let backend = SqliteBackend::open(&path, Default::default()).await?;
        backend.migrate().await?;
        hostile_inputs_are_harmless(Arc::new(backend)).await?;
        // Opened again: the schema is current and every job is there.
        let again = SqliteBackend::open(&path, Default::default()).await?;
        again.migrate().await?;
        let all = JobListParams {
            limit: 100,
            ..JobListParams::default()
        };
        assert_eq!(again.job_list(&all).await?.len(), HOSTILE.len() + 1);
        anyhow::Ok(())
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}
