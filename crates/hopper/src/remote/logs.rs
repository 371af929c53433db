//! Per-job logs over the wire: a runtime on the remote transport sends what its handlers
//! log as `log` requests (`docs/protocol.md`), and the server stores them; `job_logs`
//! requests read a job's logs back, a page of attempts at a time.

use std::time::Duration;

use async_trait::async_trait;
use hopper_core::job_log::{AttemptLog, JobLogAppend, LOG_STORE_WINDOW, LogStore, merge_appends};
use hopper_core::{JobId, Lease, Result};
use hopper_protocol::{LogLineSpec, Reply, Request};

use super::{RemoteBackend, predates, unexpected};

#[async_trait]
impl LogStore for RemoteBackend {
    /// A request whose attempt's rows the server found held elsewhere is answered as a
    /// transient error, returned as such: nothing here is ever returned as held.
    async fn job_log_append(&self, appends: &[JobLogAppend]) -> Result<Vec<Lease>> {
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
        Ok(Vec::new())
    }

    /// The bound of the Python and Node workers, which send a `log` request up to three
    /// times, each with [`LOG_STORE_WINDOW`] for transient errors:
    /// 3 × (5 s + `request_timeout`) from the first send, 45 s by default. Within it a
    /// request left without a reply within `request_timeout`, or in flight when the
    /// connection was lost, is sent again, as is one answered with a transient error. The
    /// server's log writer may answer late (it waits for a lock on the whole table), and a
    /// server restarting takes longer than the 5 s a database store gets.
    fn job_log_store_window(&self) -> Duration {
        LOG_STORE_WINDOW
            .saturating_add(self.options().request_timeout)
            .saturating_mul(3)
    }

    /// Reads the server's pages (at most [`hopper_protocol::LOGS_PAGE`] attempts each),
    /// following its `next`, until `limit` attempts are read or there are no more.
    async fn job_logs_page(&self, job: JobId, after: i32, limit: u32) -> Result<Vec<AttemptLog>> {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        let mut logs = Vec::new();
        let mut after = after;
        while logs.len() < limit {
            let (page, next) = self.job_logs_request(job, after).await?;
            logs.extend(page);
            match next {
                // A cursor that does not move on would loop for ever.
                Some(next) if next > after => after = next,
                _ => break,
            }
        }
        logs.truncate(limit);
        Ok(logs)
    }

    /// Reads the pages the server sends (`job_logs`, at most [`hopper_protocol::LOGS_PAGE`]
    /// attempts each) until its `next` is null.
    async fn job_logs(&self, job: JobId) -> Result<Vec<AttemptLog>> {
        self.job_logs_page(job, 0, u32::MAX).await
    }
}

impl RemoteBackend {
    /// One `job_logs` request: a page of logs after attempt `after`, and the next cursor.
    async fn job_logs_request(
        &self,
        job: JobId,
        after: i32,
    ) -> Result<(Vec<AttemptLog>, Option<i32>)> {
        match self
            .request(move |req| Request::JobLogs {
                req,
                id: job,
                after,
            })
            .await
        {
            Ok(Reply::Logs { logs, next, .. }) => Ok((logs, next)),
            Ok(other) => Err(unexpected(&other)),
            Err(e) => Err(predates(e, "job_logs")),
        }
    }
}
