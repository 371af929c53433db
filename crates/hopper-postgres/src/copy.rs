//! Bulk insert through binary `COPY`: the fastest way into PostgreSQL (measured in
//! `docs/benchmarks.md`: about twice `INSERT … SELECT unnest(…)`).
//!
//! Two entry points: [`insert_jobs`] inside a caller's transaction, and [`insert_jobs_pooled`]
//! on a pooled connection of hopper's own, which pipelines its statements so that a call
//! costs two round trips instead of seven (W1, `docs/benchmarks.md`).
//!
//! tokio-postgres runs a `COPY` only as a named prepared statement, so behind a transaction
//! pooler ([`crate::Pooler::Transaction`]) bulk inserts take `job_insert_many_full.sql`
//! instead (`PgBackend::needs_upsert_many`).

use bytes::{Bytes, BytesMut};
use chrono::{DateTime, Utc};
use futures_util::pin_mut;
use hopper_core::{JobState, NewJob, Result};
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{IsNull, Json, Kind, ToSql, Type, to_sql_checked};
use tokio_postgres::{CopyInSink, GenericClient, Transaction};

use crate::error::map_pg;
use crate::pooled::TxConnection;
use crate::sql::Queries;
use crate::statement::forget_if_stale;

/// A job state written as a PostgreSQL enum label (binary format: the label's bytes).
#[derive(Debug)]
struct StateLabel(JobState);

impl ToSql for StateLabel {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(self.0.as_str().as_bytes());
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        matches!(ty.kind(), Kind::Enum(_))
    }

    to_sql_checked!();
}

/// Inserts `jobs` with binary COPY inside `tx`, then wakes their queues (delivered at
/// commit). Jobs due by `now` are `available`, later ones `scheduled`. `state_type` is the
/// schema's `job_state` enum type ([`state_type`]).
pub async fn insert_jobs(
    tx: &Transaction<'_>,
    queries: &Queries,
    state_type: &Type,
    jobs: &[NewJob],
    now: DateTime<Utc>,
) -> Result<()> {
    let sink = tx
        .copy_in(&queries.job_insert_many_copy.sql)
        .await
        .map_err(map_pg)?;
    let writer = writer(sink, state_type);
    pin_mut!(writer);
    write_rows(writer.as_mut(), jobs, now).await?;
    writer.finish().await.map_err(map_pg)?;
    let due = due_queues(jobs, now);
    if !due.is_empty() {
        tx.execute(&queries.job_notify_queues.sql, &[&due])
            .await
            .map_err(map_pg)?;
    }
    Ok(())
}

/// [`insert_jobs`] in a transaction of its own on `client`, a pooled connection, with its
/// statements pipelined: `BEGIN`, the wake-up and the start of the `COPY` go out together
/// (one round trip), then the rows, then the end of the `COPY` and `COMMIT` together (one
/// more). The wake-up is queued before the rows, which changes nothing: PostgreSQL delivers
/// it at commit, and not at all if the transaction fails. Both statements are prepared
/// once per connection.
///
/// Unless it reaches its `COMMIT`, failed or cancelled, the connection leaves the pool
/// ([`TxConnection`]): nothing half-done is seen, and the next call gets a clean one.
pub async fn insert_jobs_pooled(
    client: deadpool_postgres::Object,
    queries: &Queries,
    state_type: &Type,
    jobs: &[NewJob],
    now: DateTime<Utc>,
) -> Result<()> {
    let client = TxConnection::new(client);
    pipelined(&client, queries, state_type, jobs, now).await?;
    client.release();
    Ok(())
}

async fn pipelined(
    client: &deadpool_postgres::Object,
    queries: &Queries,
    state_type: &Type,
    jobs: &[NewJob],
    now: DateTime<Utc>,
) -> Result<()> {
    // Both prepared before anything is sent: a statement prepared inside the pipeline
    // would queue its execution behind the COPY, which ends only after the rows.
    let copy = client
        .prepare_cached(&queries.job_insert_many_copy.sql)
        .await
        .map_err(map_pg)?;
    let notify = client
        .prepare_cached(&queries.job_notify_queues.sql)
        .await
        .map_err(map_pg)?;
    let due = due_queues(jobs, now);
    let notify = async {
        if due.is_empty() {
            return Ok(0);
        }
        client.execute(&notify, &[&due]).await
    };
    // try_join polls in order, so the three requests are written in this order before any
    // answer is awaited.
    let started = tokio::try_join!(
        client.batch_execute("BEGIN"),
        notify,
        client.copy_in::<_, Bytes>(&copy),
    );
    let ((), _, sink) = forget_if_stale(client, started).map_err(map_pg)?;
    let writer = writer(sink, state_type);
    pin_mut!(writer);
    write_rows(writer.as_mut(), jobs, now).await?;
    // A failed COPY aborts the transaction and the COMMIT then only ends it; the COPY's
    // error is the one returned.
    let (copied, committed) = tokio::join!(writer.finish(), client.batch_execute("COMMIT"));
    copied.map_err(map_pg)?;
    committed.map_err(map_pg)
}

/// A binary COPY writer for the columns of `job_insert_many_copy.sql`.
fn writer(sink: CopyInSink<Bytes>, state_type: &Type) -> BinaryCopyInWriter {
    let types = [
        Type::UUID,
        Type::TEXT,
        Type::TEXT,
        Type::JSONB,
        state_type.clone(),
        Type::INT2,
        Type::TIMESTAMPTZ,
        Type::INT4,
        Type::INT4,
        Type::JSONB,
    ];
    BinaryCopyInWriter::new(sink, &types)
}

/// Writes one row per job: due by `now` means `available`, later `scheduled`.
async fn write_rows(
    mut writer: std::pin::Pin<&mut BinaryCopyInWriter>,
    jobs: &[NewJob],
    now: DateTime<Utc>,
) -> Result<()> {
    for job in jobs {
        let run_at = job.run_at.unwrap_or(now);
        let state = if run_at > now {
            JobState::Scheduled
        } else {
            JobState::Available
        };
        let timeout_ms = job.timeout_ms();
        writer
            .as_mut()
            .write(&[
                &job.id,
                &job.queue,
                &job.kind,
                &job.args,
                &StateLabel(state),
                &job.priority.0,
                &run_at,
                &job.max_attempts,
                &timeout_ms,
                &Json(&job.meta),
            ])
            .await
            .map_err(map_pg)?;
    }
    Ok(())
}

/// The queues that get a job due by `now`: the ones to wake.
fn due_queues(jobs: &[NewJob], now: DateTime<Utc>) -> Vec<&str> {
    let mut due: Vec<&str> = Vec::new();
    for job in jobs {
        if job.run_at.is_none_or(|at| at <= now) && !due.contains(&job.queue.as_str()) {
            due.push(&job.queue);
        }
    }
    due
}

/// The schema's `job_state` enum type, whose OID differs per database.
pub async fn state_type(client: &impl GenericClient, queries: &Queries) -> Result<Type> {
    let statement = client
        .prepare(&queries.job_state_type.sql)
        .await
        .map_err(map_pg)?;
    statement
        .columns()
        .first()
        .map(|c| c.type_().clone())
        .ok_or_else(|| hopper_core::Error::Schema("job_state type not found".into()))
}
