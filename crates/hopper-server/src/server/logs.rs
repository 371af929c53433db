//! Per-job logs through the server: `log` stores what a worker's handlers wrote (queued
//! for the log writer, [`crate::log_writer::store_logs`], which stores what waits in one
//! statement), and `job_logs` reads a job's logs back a page at a time
//! (`docs/protocol.md`).
//!
//! A peer logs only for attempts of its server's node: an attempt it holds, one it held or
//! reported lately (its last lines may come after its outcome, [`super::peers::Loggable`]),
//! or one no peer holds that is its job's latest attempt and was made under this server's
//! node, whatever the job's state now (lines sent after the outcome and resent after a
//! reconnect, or after a restart of this server, whose node id is the same), looked up in
//! the database ([`hopper_core::MaintenanceStore::job_attempts_of_node`]). Anything else
//! (another peer's order, another node's job, an earlier attempt) gets `lease_lost` and is
//! stored nowhere. Outcomes and extensions are narrower: only a running attempt's.

use hopper::backend::JobGetParams;
use hopper_core::backend::JobAttemptsOfNodeParams;
use hopper_core::job_log::JobLogAppend;
use hopper_core::{Backend, Error, JobId, Lease, NodeId, Result};
use hopper_protocol::{FinishResult, LOGS_PAGE, Reply};
use tokio::sync::mpsc::error::TrySendError;

use super::{Core, Event, PeerId, hex};
use crate::in_flight::{BUSY, Permit};
use crate::log_writer::LogItem;

/// `log` requests of one peer for one lease no peer holds, waiting for the lookup of the
/// lease ([`Core::check_log`]): the first, whose place in flight the lookup holds, and
/// those that came after it, in order, each with its own.
pub(crate) struct LogCheck {
    first: (u64, JobLogAppend),
    rest: Vec<LogItem>,
}

impl Core {
    /// A `log` request: its lines are queued for storing if the lease is the peer's to log
    /// for (see the module docs); one no peer holds is looked up first. Refused with
    /// `lease_lost` otherwise.
    pub(super) fn on_log(&mut self, peer: PeerId, req: u64, append: JobLogAppend) {
        let lease = append.lease;
        let key = (peer.clone(), lease);
        // Behind the lookup of the same lease's earlier lines, whatever it finds: an
        // attempt's lines are stored in the order they came.
        if self.log_checks.contains_key(&key) {
            if let Some(item) = self.log_item(peer, req, append)
                && let Some(check) = self.log_checks.get_mut(&key)
            {
                check.rest.push(item);
            }
            return;
        }
        if self.peers.may_log(&peer, &lease) {
            return self.queue_log(peer, req, append);
        }
        if self.refuse_if_held_elsewhere(&peer, req, lease.job_id, "a log") {
            return;
        }
        if self.peers.held_attempt(&peer, &lease.job_id).is_some() {
            // Another attempt of an order it holds, not one it held lately: that attempt
            // ended (a job runs one attempt at a time), as for an outcome of it.
            tracing::debug!(peer = %hex(&peer), job_id = %lease.job_id, attempt = lease.attempt, "refused a log for another attempt of an order the peer holds");
            let result = FinishResult::LeaseLost;
            return self.reply(&peer, Reply::Ack { req, result });
        }
        self.check_log(peer, req, append);
    }

    /// A `log` for a lease no peer holds: stored only if it is its job's latest attempt,
    /// made under this server's node ([`own_attempt`]), with a place among the peer's
    /// requests in flight (its requests for the same lease meanwhile wait behind the
    /// lookup, each with a place of its own, [`Core::on_log`]). A backend that keeps no
    /// logs acknowledges at once.
    fn check_log(&mut self, peer: PeerId, req: u64, append: JobLogAppend) {
        if self.backend.logs().is_none() {
            let result = FinishResult::Recorded;
            return self.reply(&peer, Reply::Ack { req, result });
        }
        let lease = append.lease;
        let key = (peer.clone(), lease);
        let queued = match self.requests.try_queue(&peer) {
            Ok(queued) => queued,
            Err(busy) => return self.reply(&peer, Reply::transient(Some(req), busy)),
        };
        let check = LogCheck {
            first: (req, append),
            rest: Vec::new(),
        };
        self.log_checks.insert(key, check);
        let (backend, node, events) = (
            self.backend.clone(),
            self.config.node_id,
            self.events.clone(),
        );
        tokio::spawn(async move {
            // Run even once its peer is gone: the lines it sent before it went count.
            let running = queued.turn_kept().await;
            let own = own_attempt(&*backend, node, lease).await;
            let place = running.into_place();
            let checked = Event::LogChecked {
                peer,
                lease,
                own,
                place,
            };
            let _ = events.send(checked).await;
        });
    }

    /// The lookup of `lease` for `peer`'s `log` requests came back: `own` if it is its
    /// job's latest attempt, made under this node. Their lines are queued for storing, in
    /// order, when it is, or when the peer reported its outcome meanwhile; refused with
    /// `lease_lost` otherwise; answered with the error if the lookup failed.
    pub(super) fn on_log_checked(
        &mut self,
        peer: PeerId,
        lease: Lease,
        own: Result<bool>,
        place: Permit,
    ) {
        let Some(LogCheck { first, rest }) = self.log_checks.remove(&(peer.clone(), lease)) else {
            return;
        };
        let (req, append) = first;
        let first = LogItem {
            peer: peer.clone(),
            req,
            append,
            permit: place,
        };
        let items = std::iter::once(first).chain(rest);
        match own {
            Ok(own) if own || self.peers.may_log(&peer, &lease) => {
                self.peers.allow_logs(&peer, lease);
                items.for_each(|item| self.send_log(item));
            }
            Ok(_) => {
                self.refused_foreign(&peer, lease, "a log");
                for LogItem { req, .. } in items {
                    let result = FinishResult::LeaseLost;
                    self.reply(&peer, Reply::Ack { req, result });
                }
            }
            Err(e) => {
                tracing::debug!(peer = %hex(&peer), error = %crate::convert::detail(&e), "looking up a log's lease failed");
                for item in items {
                    self.reply(&peer, Reply::failure(Some(item.req), &e));
                }
            }
        }
    }

    /// Queues a `log` request's lines for the log writer, which acknowledges it once they
    /// are stored. Each one waiting holds one of the requests in flight, so the queue is
    /// bounded: past the server's bound or its peer's the request is refused at once with a
    /// transient `internal` ("busy"), as any other request then is. It takes no turn among
    /// its peer's requests that execute: the writer stores them all on its one connection.
    /// A backend that keeps no logs acknowledges at once.
    fn queue_log(&self, peer: PeerId, req: u64, append: JobLogAppend) {
        if self.backend.logs().is_none() {
            let result = FinishResult::Recorded;
            return self.reply(&peer, Reply::Ack { req, result });
        }
        if let Some(item) = self.log_item(peer, req, append) {
            self.send_log(item);
        }
    }

    /// A `log` request with its place in flight, or `None` when it has none (answered
    /// "busy").
    fn log_item(&self, peer: PeerId, req: u64, append: JobLogAppend) -> Option<LogItem> {
        match self.requests.try_acquire(&peer) {
            Ok(permit) => Some(LogItem {
                peer,
                req,
                append,
                permit,
            }),
            Err(busy) => {
                self.reply(&peer, Reply::transient(Some(req), busy));
                None
            }
        }
    }

    /// Hands a `log` request, holding its place in flight, to the log writer.
    fn send_log(&self, item: LogItem) {
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

/// Whether `lease` is its job's latest attempt and was made under `node`, whatever the
/// job's state now: a peer of this server may add lines to it. A backend without
/// [`hopper_core::MaintenanceStore`] cannot say, and it is not.
async fn own_attempt(backend: &dyn Backend, node: NodeId, lease: Lease) -> Result<bool> {
    let Some(maintenance) = backend.maintenance() else {
        return Ok(false);
    };
    let params = JobAttemptsOfNodeParams {
        node,
        leases: vec![lease],
    };
    Ok(maintenance
        .job_attempts_of_node(&params)
        .await?
        .contains(&lease))
}
