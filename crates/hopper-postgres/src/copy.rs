//! Bulk insert through binary `COPY`: the fastest way into PostgreSQL (measured in
//! `docs/benchmarks.md`: about twice `INSERT … SELECT unnest(…)`).

use bytes::BytesMut;
use chrono::{DateTime, Utc};
use futures_util::pin_mut;
use hopper_core::{JobState, NewJob, Result};
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{IsNull, Kind, ToSql, Type, to_sql_checked};
use tokio_postgres::{GenericClient, Transaction};

use crate::error::map_pg;
use crate::sql::Queries;

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
    ];
    let sink = tx
        .copy_in(&queries.job_insert_many_copy)
        .await
        .map_err(map_pg)?;
    let writer = BinaryCopyInWriter::new(sink, &types);
    pin_mut!(writer);
    let mut due_queues: Vec<&str> = Vec::new();
    for job in jobs {
        let run_at = job.run_at.unwrap_or(now);
        let state = if run_at > now {
            JobState::Scheduled
        } else {
            JobState::Available
        };
        if state == JobState::Available && !due_queues.contains(&job.queue.as_str()) {
            due_queues.push(&job.queue);
        }
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
            ])
            .await
            .map_err(map_pg)?;
    }
    writer.finish().await.map_err(map_pg)?;
    if !due_queues.is_empty() {
        tx.execute(&queries.job_notify_queues, &[&due_queues])
            .await
            .map_err(map_pg)?;
    }
    Ok(())
}

/// The schema's `job_state` enum type, whose OID differs per database.
pub async fn state_type(client: &impl GenericClient, queries: &Queries) -> Result<Type> {
    let statement = client
        .prepare(&queries.job_state_type)
        .await
        .map_err(map_pg)?;
    statement
        .columns()
        .first()
        .map(|c| c.type_().clone())
        .ok_or_else(|| hopper_core::Error::Schema("job_state type not found".into()))
}
