//! `hopper serve` keeps the job table bounded and clean on its own, as a worker runtime
//! does: remote workers have no database connection to prune or vacuum with, so a
//! deployment of only remote workers relies on the server for both.

use std::time::Duration;

use crate::common::*;
use hopper::maintenance::Housekeeping;
use hopper::testing::TestDatabase;

/// Jobs left in the test's table, the vacuums counted for it, and its dead rows.
async fn table_state(
    client: &tokio_postgres::Client,
    schema: &str,
) -> anyhow::Result<(i64, i64, i64)> {
    let row = client
        .query_one(
            &format!(
                "SELECT (SELECT count(*) FROM {schema}.jobs), vacuum_count, n_dead_tup
                 FROM pg_stat_user_tables WHERE relid = '{schema}.jobs'::regclass"
            ),
            &[],
        )
        .await?;
    Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_prunes_finished_jobs_and_vacuums_the_table() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let schema = db.schema().to_owned();
    let (client, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    // 3,000 jobs created three days ago (UUIDv7 ids of that time, which the pruner's
    // primary-key range relies on) and completed two days ago, past the 1-hour retention
    // below; 100 completed just now, within it; and 5,000 dead row versions.
    client
        .batch_execute(&format!(
            "INSERT INTO {schema}.jobs (id, kind, state, created_at, finished_at)
               SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                          PLACING substring(int8send((extract(epoch FROM now()) * 1000)::bigint
                                                     - 3 * 86400000) FROM 3)
                          FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid,
                      'old', 'completed', now() - interval '3 days', now() - interval '2 days'
               FROM generate_series(1, 3000);
             INSERT INTO {schema}.jobs (id, kind, state, finished_at)
               SELECT {schema}.uuid_v7(), 'recent', 'completed', now()
               FROM generate_series(1, 100);
             INSERT INTO {schema}.jobs (id, kind) SELECT gen_random_uuid(), 'dead'
               FROM generate_series(1, 5000);
             DELETE FROM {schema}.jobs WHERE kind = 'dead';
             SELECT pg_stat_force_next_flush();"
        ))
        .await?;
    let (_, vacuums_before, _) = table_state(&client, &schema).await?;

    let mut config = config(&db, Duration::from_secs(1)).await;
    config.housekeeping = Housekeeping::default()
        .with_completed_retention(Duration::from_secs(3600))
        .with_prune_interval(Some(Duration::from_millis(50)))
        .with_prune_batch(500)
        .with_prune_pause(Duration::ZERO)
        .with_vacuum_interval(Some(Duration::from_millis(50)));
    let server = start(config).await;

    // Both loops tick every 50 ms: a bounded wait for their effect.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (jobs, vacuums, _) = table_state(&client, &schema).await?;
        if jobs == 100 && vacuums > vacuums_before {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "after 30 s: {jobs} jobs left (100 expected), {vacuums} vacuums (more than {vacuums_before} expected)"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let recent = client
        .query_one(
            &format!("SELECT count(*) FROM {schema}.jobs WHERE kind = 'recent'"),
            &[],
        )
        .await?;
    assert_eq!(
        recent.get::<_, i64>(0),
        100,
        "jobs within their retention stay"
    );
    server.shutdown().await;
    Ok(())
}
