//! Per-job logs through the server: `log` stores what a worker's handlers wrote, and
//! `job_logs` reads a job's logs back a page at a time (`docs/protocol.md`).

use hopper::backend::JobGetParams;
use hopper_core::{Error, JobId};
use hopper_protocol::{LOGS_PAGE, Reply};

use super::{Core, PeerId};

impl Core {
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
