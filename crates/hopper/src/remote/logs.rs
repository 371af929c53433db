//! Per-job logs over the wire: a runtime on the remote transport sends what its handlers
//! log as `log` requests (`docs/protocol.md`), and the server stores them. Reading logs
//! back is not part of the protocol: read them from the database (`hopper jobs show`, the
//! HTTP API).

use async_trait::async_trait;
use hopper_core::job_log::{AttemptLog, JobLogAppend, LogStore, merge_appends};
use hopper_core::{Error, JobId, Result};
use hopper_protocol::{LogLineSpec, Reply, Request};

use super::{RemoteBackend, unexpected};

#[async_trait]
impl LogStore for RemoteBackend {
    async fn job_log_append(&self, appends: &[JobLogAppend]) -> Result<()> {
        for m in merge_appends(appends) {
            let lines: Vec<LogLineSpec> = m
                .lines
                .into_iter()
                .map(|l| LogLineSpec {
                    level: l.level.as_str().to_owned(),
                    message: l.message,
                    fields: (!l.fields.is_empty()).then_some(serde_json::Value::Object(l.fields)),
                    at: Some(l.at),
                })
                .collect();
            let dropped = u64::try_from(m.dropped).unwrap_or(0);
            let reply = self
                .request(move |req| Request::Log {
                    req,
                    id: m.lease.job_id,
                    attempt: m.lease.attempt,
                    lines,
                    dropped,
                })
                .await?;
            match reply {
                Reply::Ack { .. } => {}
                other => return Err(unexpected(&other)),
            }
        }
        Ok(())
    }

    async fn job_logs(&self, job: JobId) -> Result<Vec<AttemptLog>> {
        Err(Error::Unsupported(format!(
            "the logs of job {job} cannot be read through hopper serve; read them from the database (hopper jobs show, the HTTP API)"
        )))
    }
}
