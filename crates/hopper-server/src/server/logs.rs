//! Per-job logs through the server: `log` stores what a worker's handlers wrote (queued
//! for the log writer, [`crate::log_writer::store_logs`], which stores what waits in one
//! statement), and `job_logs` reads a job's logs back a page at a time
//! (`docs/protocol.md`).

use hopper::backend::JobGetParams;
use hopper_core::job_log::JobLogAppend;
use hopper_core::{Error, JobId};
use hopper_protocol::{FinishResult, LOGS_PAGE, Reply};
use tokio::sync::mpsc::error::TrySendError;

use super::{Core, PeerId};
use crate::in_flight::BUSY;
use crate::log_writer::LogItem;

impl Core {
    /// Queues a `log` request's lines for the log writer, which acknowledges it once they
    /// are stored. Each one waiting holds one of the requests in flight, so the queue is
    /// bounded: past the server's bound or its peer's the request is refused at once with a
    /// transient `internal` ("busy"), as any other request then is. It takes no turn among
    /// its peer's requests that execute: the writer stores them all on its one connection.
    /// A backend that keeps no logs acknowledges at once.
    pub(super) fn queue_log(&self, peer: PeerId, req: u64, append: JobLogAppend) {
        if self.backend.logs().is_none() {
            let result = FinishResult::Recorded;
            return self.reply(&peer, Reply::Ack { req, result });
        }
        let permit = match self.requests.try_acquire(&peer) {
            Ok(permit) => permit,
            Err(busy) => return self.reply(&peer, Reply::transient(Some(req), busy)),
        };
        let item = LogItem {
            peer,
            req,
            append,
            permit,
        };
        let (item, message) = match self.logs.try_send(item) {
            Ok(()) => return,
            Err(TrySendError::Full(item)) => (item, BUSY),
            Err(TrySendError::Closed(item)) => (item, "the server is stopping; retry later"),
        };
        let reply = Reply::transient(Some(item.req), message);
        self.reply(&item.peer, reply);
    }

    /// Answers `job_logs`: at most [`LOGS_PAGE`] attempts' logs after `after`, and the
    /// cursor of the next page. One more attempt is read than sent, so that `next` is null
    /// exactly on the last page. A job that does not exist is `not_found`; a backend that
    /// keeps no logs answers an empty page.
    pub(super) fn on_job_logs(&self, peer: PeerId, req: u64, id: JobId, after: i32) {
        let backend = self.backend.clone();
        self.spawn_reply(peer, req, async move {
            let mut logs = match backend.logs() {
                Some(store) => store.job_logs_page(id, after, LOGS_PAGE + 1).await?,
                None => Vec::new(),
            };
            let page = LOGS_PAGE as usize;
            let next = if logs.len() > page {
                logs.truncate(page);
                logs.last().map(|l| l.attempt)
            } else {
                None
            };
            // Only an empty page costs a second read, to tell "no logs" from "no job".
            if logs.is_empty() && backend.job_get(&JobGetParams { id }).await?.is_none() {
                return Err(Error::NotFound(format!("job {id}")));
            }
            Ok(Reply::Logs {
                req,
                id,
                logs,
                next,
            })
        });
    }
}
