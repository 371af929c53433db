//! The job table's own vacuum (`MaintenanceStore::job_vacuum`): due only when dead row versions
//! piled up and no vacuum ran lately; afterwards, not due again.
//!
//! A database of its own (`TestDatabase::in_own_database`): a vacuum removes dead rows only
//! when no transaction of the database is older than them, and any other session's open
//! transaction in a shared database would be (seen: 5,000 dead rows left), whether another
//! test of this run or another process on the server.

#[path = "integration/support.rs"]
mod support;

use std::time::Duration;

use hopper::backend::JobVacuumParams;
use hopper::testing::TestDatabase;
use support::connect;

/// Vacuums counted for the test's job table, and its dead rows, as the statistics say.
async fn vacuum_stats(db: &TestDatabase) -> anyhow::Result<(i64, i64)> {
    let client = connect(db.url()).await?;
    let row = client
        .query_one(
            "SELECT vacuum_count, n_dead_tup FROM pg_stat_user_tables
             WHERE relid = ($1 || '.jobs')::regclass",
            &[&db.schema()],
        )
        .await?;
    Ok((row.try_get(0)?, row.try_get(1)?))
}

#[tokio::test]
async fn dead_rows_are_vacuumed_once_due_and_not_again() -> anyhow::Result<()> {
    let db = TestDatabase::in_own_database().await?;
    let backend = db.backend();
    let store = backend
        .maintenance()
        .ok_or_else(|| anyhow::anyhow!("PostgreSQL does maintenance"))?;
    let hour = JobVacuumParams {
        min_interval: Duration::from_secs(3600),
    };
    assert!(!store.job_vacuum(&hour).await?, "a fresh table is not due");

    // 5,000 rows inserted and deleted: 5,000 dead row versions. The statistics of this
    // session are flushed at once, not up to a second later.
    let client = connect(db.url()).await?;
    let schema = db.schema();
    client
        .batch_execute(&format!(
            "INSERT INTO {schema}.jobs (id, kind) SELECT gen_random_uuid(), 'vacuum.test'
               FROM generate_series(1, 5000);
             DELETE FROM {schema}.jobs;
             SELECT pg_stat_force_next_flush();"
        ))
        .await?;
    // The flush happens when that session goes idle: a bounded wait for it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while vacuum_stats(&db).await?.1 < 5000 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "statistics never arrived"
        );
        tokio::task::yield_now().await;
    }

    assert!(store.job_vacuum(&hour).await?, "5,000 dead rows are due");
    let (vacuums, dead) = vacuum_stats(&db).await?;
    assert!(vacuums >= 1, "the table was vacuumed");
    assert_eq!(dead, 0, "and its dead rows are gone");
    assert!(
        !store.job_vacuum(&hour).await?,
        "just vacuumed: not due again within the interval"
    );
    Ok(())
}
