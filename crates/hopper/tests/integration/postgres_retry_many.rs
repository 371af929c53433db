//! `job_retry_many` when a unique key is taken under it: the statement checks that no
//! waiting or running job holds a failed job's key, then updates; a transaction that takes
//! the key between the two breaks the unique index, and the backend runs the statement
//! again, which sees the holder and leaves that job failed.

use hopper::backend::JobRetryManyParams;
use hopper::testing::TestDatabase;
use hopper::{Client, NewJob};
use serde_json::json;
use std::time::Duration;

use crate::support::{connect, eventually};

#[tokio::test]
async fn retry_many_runs_again_when_a_key_is_taken_under_it() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = Client::new(db.backend());
    let schema = db.schema();
    let sql = connect(db.url()).await?;
    let keyed = || NewJob::new("sync", json!({})).with_unique_key("sync:acme");
    // A completed job of the key, then a failed one of the same key, and a plain failed job.
    let done = client.insert(keyed()).await?;
    sql.execute(
        &format!("UPDATE {schema}.jobs SET state = 'completed', finished_at = now() WHERE id = $1"),
        &[&done],
    )
    .await?;
    let failed = client.insert(keyed()).await?;
    let plain = client.insert(NewJob::new("sync", json!({}))).await?;
    sql.execute(
        &format!(
            "UPDATE {schema}.jobs SET state = 'failed', finished_at = now() WHERE id = ANY($1)"
        ),
        &[&vec![failed, plain]],
    )
    .await?;

    // Another transaction takes the key (the completed job back to available) and holds it
    // uncommitted: the retry's check cannot see it, its update waits on it.
    let mut holder = connect(db.url()).await?;
    let tx = holder.transaction().await?;
    let xid: i64 = tx
        .query_one(
            &format!(
                "UPDATE {schema}.jobs SET state = 'available', finished_at = NULL WHERE id = $1
                 RETURNING txid_current()"
            ),
            &[&done],
        )
        .await?
        .get(0);
    let backend = db.backend();
    let retry =
        tokio::spawn(async move { backend.job_retry_many(&JobRetryManyParams::default()).await });
    eventually(
        Duration::from_secs(10),
        "the retry waits on the holder",
        || {
            let sql = &sql;
            async move {
                let waiting: i64 = sql
                    .query_one(
                        "SELECT count(*) FROM pg_locks
                     WHERE locktype = 'transactionid' AND NOT granted
                       AND transactionid::text::bigint = $1",
                        &[&xid],
                    )
                    .await?
                    .get(0);
                Ok(waiting > 0)
            }
        },
    )
    .await?;
    tx.commit().await?;

    let retried = retry.await??;
    assert_eq!(
        retried, 1,
        "the plain job, once; the keyed one stays failed"
    );
    let states: Vec<(uuid::Uuid, String)> = sql
        .query(
            &format!("SELECT id, state::text FROM {schema}.jobs ORDER BY id"),
            &[],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        states,
        vec![
            (done, "available".to_owned()),
            (failed, "failed".to_owned()),
            (plain, "available".to_owned()),
        ]
    );
    Ok(())
}
