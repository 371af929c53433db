//! The server's event loop: one task owns every peer's state; the database work it starts
//! runs in spawned tasks that report back as [`Event`]s or reply to the peer directly.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use bytes::Bytes;
use hopper::backend::{JobCancelParams, JobGetParams};
use hopper_core::log_limit::LogThrottle;
use hopper_core::{Backend, ClaimedJob, Finish, JobId, Lease, NewJob, Result, Wakeup};
use hopper_protocol::{
    ErrorCode, FinishResult, JobInfo, OutcomeItem, Reply, Request, decode_request,
};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::ServeConfig;
use crate::auth::Access;
use crate::convert;
use crate::dispatch::Gone;
use crate::in_flight::{InFlight, Permit};
use crate::log_writer::LogItem;
use crate::outcome_writer::{FinishItem, ReplyTo};
use crate::transport::Frames;

mod hello;
mod leases;
mod logs;
mod outcomes;
mod peers;
mod start;

use hello::Hello;
use outcomes::Report;
pub(crate) use peers::{Held, Peers, Registration};
pub(crate) use start::start;

/// How often per heartbeat period the loop looks for silent peers and late orders: a peer
/// silent for three periods is dropped within 3.2.
const SWEEPS_PER_HEARTBEAT: u32 = 5;

/// The most events the loop handles after a frame before it takes the next frame.
const EVENTS_BETWEEN_FRAMES: usize = 256;

/// A peer's ROUTER routing id.
pub(crate) type PeerId = Bytes;

/// Something for the loop to handle, besides peers' frames (which come from the
/// transport's inbox, [`crate::transport::Frames`], in turn among the peers).
pub(crate) enum Event {
    /// A claim finished.
    Claimed {
        queue: String,
        limit: usize,
        result: Result<Vec<ClaimedJob>>,
    },
    /// A heartbeat's leases were extended; `lost` are no longer the worker's, `adopt` are
    /// leases of an earlier run of this server it listed, found to be this node's (when
    /// `lost` is an error, those it listed to adopt, to try again at its next heartbeat).
    HeartbeatDone {
        peer: PeerId,
        req: u64,
        lost: Result<Vec<Lease>>,
        adopt: Vec<Lease>,
    },
    /// A database notification.
    Wakeup(Wakeup),
    /// Jobs leased under this server's node id when it started (by an earlier run of it).
    Inherited(Vec<Lease>),
    /// These outcomes were written (or failed for good): a later outcome for the same lease
    /// goes to the database, which says whether it still holds.
    Written(Vec<Lease>),
    /// A connection closed; the transport cannot say whose (see `transport.rs`).
    ConnectionClosed,
    /// The probe that follows [`Event::ConnectionClosed`] by [`REPROBE_AFTER`].
    Reprobe,
    /// A message to this peer found its connection gone.
    PeerGone(PeerId),
    /// The outcomes of `report` for leases no peer held were looked up: `own` are those
    /// running under this server's node. `place` is the report's among its peer's requests
    /// in flight.
    Checked {
        peer: PeerId,
        report: Report,
        own: HashSet<Lease>,
        place: Permit,
    },
    /// The lease of `log` requests that no peer held was looked up: `own` if it runs under
    /// this server's node. `place` is the first request's among its peer's in flight.
    LogChecked {
        peer: PeerId,
        lease: Lease,
        own: Result<bool>,
        place: Permit,
    },
}

/// How long after a closed connection the workers are probed a second time: libzmq may
/// tell of the close a moment before the ROUTER forgets the routing id, and closes that
/// follow within this time are covered by the same probe.
pub(crate) const REPROBE_AFTER: Duration = Duration::from_millis(100);

/// The settings and channels every part of the loop uses.
pub(crate) struct Core {
    pub config: ServeConfig,
    pub backend: Arc<dyn Backend>,
    pub peers: Peers,
    pub out: mpsc::Sender<(PeerId, Reply)>,
    pub events: mpsc::Sender<Event>,
    pub finisher: mpsc::Sender<FinishItem>,
    /// `log` requests for the log writer ([`log_writer::store_logs`]).
    pub logs: mpsc::Sender<LogItem>,
    /// Queues that may have jobs ready (a claim was short: not until a wake-up or a poll).
    pub hot: HashMap<String, bool>,
    /// A claim is under way (one at a time, so no worker's credit is promised twice).
    pub claiming: bool,
    /// A wake-up arrived while the claim under way ran: a short claim then does not mean
    /// the queue is drained (the job that woke it may have committed after the claim read).
    pub claim_woken: bool,
    pub next_queue: usize,
    /// When to release inherited leases that no reconnected worker has claimed.
    pub inherit_at: Option<Instant>,
    /// Until then, every job this run has claimed, seen in a heartbeat or had reported:
    /// none of those is inherited.
    pub seen: Option<HashSet<JobId>>,
    /// Bounds the database requests in flight for peers (submit, status, cancel, extend,
    /// log), in all and per peer, so a flood from one peer cannot pile up tasks without end
    /// nor leave the other peers only "busy" replies, and those of one peer that execute at
    /// once, so its requests stuck on a lock cannot take the whole pool.
    pub requests: InFlight,
    /// The peers whose heartbeat's extend runs: one at a time each (`leases.rs`).
    pub extending: HashSet<PeerId>,
    /// Leases whose outcome is queued for writing: a second outcome for one of them (a
    /// repeat in the same message, or a contradicting one sent before the first was
    /// acknowledged) is answered `lease_lost` and never written.
    pub writing: HashSet<(JobId, i32)>,
    /// `log` requests for leases no peer holds, by peer and lease, waiting for the lookup
    /// of the lease (`logs.rs`); each holds a place in flight.
    pub log_checks: HashMap<(PeerId, Lease), logs::LogCheck>,
    /// Refused hellos, logged at most once per interval.
    pub refusals: LogThrottle,
    /// Requests refused before a hello, logged at most once per interval.
    pub early_refusals: LogThrottle,
    /// Frames refused undecoded (not CBOR, not a request, a field out of range), logged at
    /// most once per interval: any peer can send them, before a hello, as fast as it likes.
    pub frame_refusals: LogThrottle,
    /// Outcomes and extends refused for leases this server's node does not hold, logged at
    /// most once per interval.
    pub foreign_refusals: LogThrottle,
    /// Queues to claim from again at the next poll tick: their last claim found jobs (or
    /// failed). The queues of workers that reported outcomes join them at the tick (a limit
    /// may have room again). Idle queues are not polled one by one; notifications wake them.
    pub active: HashSet<String>,
    /// The next queue the poll tick re-checks as a safety net, one per tick, whatever
    /// number of queues is served (the idle cost does not grow with it).
    pub poll_turn: usize,
    /// A second probe of the workers is due ([`Event::Reprobe`]).
    pub reprobing: bool,
    /// The server lost its liveness lock and has not taken it again: no claims and no
    /// node heartbeats (`liveness.rs`).
    pub fenced: Arc<AtomicBool>,
    /// The node row, published for the heartbeat at every node beat of the sweep.
    pub node: watch::Sender<hopper_core::NodeInfo>,
}

async fn run(
    mut core: Core,
    mut events: mpsc::Receiver<Event>,
    mut frames: Frames,
    stop: CancellationToken,
) {
    let mut poll = tokio::time::interval(core.config.poll_interval);
    let mut sweep = tokio::time::interval(core.config.heartbeat / SWEEPS_PER_HEARTBEAT);
    let mut sweeps: u32 = 0;
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            (peer, frame) = frames.next() => {
                core.on_frame(peer.clone(), frame);
                core.after_frame(&peer, &frames);
                // What finished while the frame was handled (a heartbeat's extend, a claim)
                // goes before the next frame: a peer's backlog of frames delays the answers
                // to the others' requests by one frame, not by a coin toss per frame.
                for _ in 0..EVENTS_BETWEEN_FRAMES {
                    let Ok(event) = events.try_recv() else { break };
                    core.on_event_or_gone(event, &mut frames);
                }
            }
            event = events.recv() => match event {
                Some(event) => core.on_event_or_gone(event, &mut frames),
                None => return,
            },
            _ = poll.tick() => core.poll(),
            _ = sweep.tick() => {
                core.sweep(sweeps.is_multiple_of(SWEEPS_PER_HEARTBEAT));
                sweeps = sweeps.wrapping_add(1);
            }
            _ = stop.cancelled() => return,
        }
        core.dispatch();
    }
}

impl Core {
    /// Handles `event`. A peer found gone with frames still waiting keeps its session until
    /// they have had their turn ([`Core::after_frame`]): what it sent before it went (its
    /// last outcomes, logs, a bye) must count, and not out of turn, ahead of the other
    /// peers' frames. Meanwhile it gets no orders.
    fn on_event_or_gone(&mut self, event: Event, frames: &mut Frames) {
        if let Event::PeerGone(peer) = &event
            && frames.waiting(peer)
            && self.peers.update(peer, |p| p.closed = true).is_some()
        {
            return;
        }
        self.on_event(event);
    }

    /// After `peer`'s frame: a peer whose connection closed has its session ended once its
    /// last frame was handled.
    fn after_frame(&mut self, peer: &PeerId, frames: &Frames) {
        let closed = self.peers.get(peer).is_some_and(|p| p.closed);
        if closed && !frames.waiting(peer) {
            self.drop_peer(peer, Instant::now(), Gone::Closed);
        }
    }

    fn on_event(&mut self, event: Event) {
        match event {
            Event::Claimed {
                queue,
                limit,
                result,
            } => self.on_claimed(queue, limit, result),
            Event::HeartbeatDone {
                peer,
                req,
                lost,
                adopt,
            } => self.on_heartbeat_done(peer, req, lost, adopt),
            Event::Wakeup(Wakeup::Jobs(queue)) => {
                if let Some(hot) = self.hot.get_mut(&queue) {
                    *hot = true;
                    self.claim_woken |= self.claiming;
                }
            }
            Event::Wakeup(Wakeup::Cancelled(id)) => self.on_cancelled(id),
            Event::Inherited(leases) => self.on_inherited(leases),
            Event::Written(leases) => {
                for lease in leases {
                    self.writing.remove(&(lease.job_id, lease.attempt));
                }
            }
            Event::ConnectionClosed => self.on_connection_closed(),
            Event::Reprobe => {
                self.reprobing = false;
                self.probe_workers();
            }
            Event::PeerGone(peer) => {
                if self.peers.contains(&peer) {
                    self.drop_peer(&peer, Instant::now(), Gone::Closed);
                }
            }
            Event::Checked {
                peer,
                report,
                own,
                place,
            } => self.take_report(peer, report, &own, Some(place)),
            Event::LogChecked {
                peer,
                lease,
                own,
                place,
            } => self.on_log_checked(peer, lease, own, place),
            Event::Wakeup(Wakeup::Resync) => {
                for hot in self.hot.values_mut() {
                    *hot = true;
                }
                self.claim_woken |= self.claiming;
            }
        }
    }

    /// Queues a reply; the sender task writes it to the socket.
    /// Never blocks the loop: when the queue is full, a task waits for room instead.
    pub fn reply(&self, peer: &PeerId, reply: Reply) {
        if let Err(mpsc::error::TrySendError::Full(item)) = self.out.try_send((peer.clone(), reply))
        {
            let out = self.out.clone();
            tokio::spawn(async move {
                let _ = out.send(item).await;
            });
        }
    }

    fn on_frame(&mut self, peer: PeerId, frame: Bytes) {
        if self.peers.get(&peer).is_some_and(|p| p.closed) && !kept_when_closed(&frame) {
            return;
        }
        if frame.len() <= self.config.max_frame
            && !self.peers.contains(&peer)
            && let Some(refusal) = self.refuse_before_hello(&peer, &frame)
        {
            return self.reply(&peer, refusal);
        }
        let request = match decode_request(&frame, self.config.max_frame) {
            Ok(request) => request,
            Err(e) => {
                self.log_frame_refusal(&peer, &e);
                self.reply(&peer, e.to_reply());
                return;
            }
        };
        let now = Instant::now();
        match request {
            Request::Hello {
                req,
                version,
                role,
                token,
                name,
                kinds,
                queues,
                concurrency,
                prefetch,
                batch,
            } => {
                if let Some(refusal) = hello::hello_too_large(Some(req), frame.len()) {
                    return self.reply(&peer, refusal);
                }
                let hello = Hello {
                    req,
                    version,
                    role,
                    token,
                    name,
                    kinds,
                    queues,
                    concurrency,
                    prefetch,
                    batch,
                };
                self.on_hello(peer, hello, now);
            }
            request => {
                let Some(access) = self.peers.update(&peer, |p| {
                    p.last_seen = now;
                    p.access
                }) else {
                    let req = request.req();
                    self.log_early_refusal(&peer);
                    self.reply(
                        &peer,
                        Reply::error(Some(req), ErrorCode::Unauthorized, hello::BEFORE_HELLO),
                    );
                    return;
                };
                let needed = Access::needed_by(&request);
                if needed > access {
                    let message = access.refusal(needed);
                    let req = Some(request.req());
                    return self.reply(&peer, Reply::error(req, ErrorCode::Unauthorized, message));
                }
                self.on_request(peer, request, now);
            }
        }
    }

    fn on_request(&mut self, peer: PeerId, request: Request, now: Instant) {
        let backend = self.backend.clone();
        let events = self.events.clone();
        match request {
            Request::Hello { .. } => {}
            Request::Submit { req, job } => {
                let client = self.config.client.clone();
                self.spawn_reply(peer, req, async move {
                    let job = NewJob::try_from(job)?;
                    // The client's answer: under the `ignore` unique policy, the holder's id.
                    let id = match &client {
                        Some(client) => client.insert(job.clone()).await?,
                        None => {
                            backend.job_insert(&job).await?;
                            job.id
                        }
                    };
                    wake(&events, std::slice::from_ref(&job));
                    Ok(Reply::Submitted { req, ids: vec![id] })
                })
            }
            Request::SubmitBatch { req, jobs } => {
                let client = self.config.client.clone();
                self.spawn_reply(peer, req, async move {
                    let jobs = jobs
                        .into_iter()
                        .enumerate()
                        .map(|(i, spec)| {
                            NewJob::try_from(spec).map_err(|e| {
                                hopper_core::Error::InvalidInput(format!(
                                    "job {i} of the batch: {e}"
                                ))
                            })
                        })
                        .collect::<Result<Vec<_>>>()?;
                    match &client {
                        Some(client) => client.insert_many(&jobs).await?,
                        None => backend.job_insert_many(&jobs).await?,
                    }
                    wake(&events, &jobs);
                    Ok(Reply::Submitted {
                        req,
                        ids: jobs.iter().map(|j| j.id).collect(),
                    })
                })
            }
            Request::Status { req, id } => self.spawn_reply(peer, req, async move {
                match backend.job_get(&JobGetParams { id }).await? {
                    Some(job) => Ok(Reply::Job {
                        req,
                        job: JobInfo::from(job),
                    }),
                    None => Err(hopper_core::Error::NotFound(format!("job {id}"))),
                }
            }),
            Request::Cancel { req, id } => {
                let admin = self.admin_backend();
                self.spawn_reply(peer, req, async move {
                    let job = admin.job_cancel(&JobCancelParams { id }).await?;
                    Ok(Reply::Job {
                        req,
                        job: JobInfo::from(job),
                    })
                })
            }
            single @ (Request::Completed { .. }
            | Request::Failed { .. }
            | Request::Snoozed { .. }
            | Request::Released { .. }) => {
                if let Some((req, item)) = OutcomeItem::from_request(&single) {
                    if let Err(e) = item.check() {
                        let message = e.to_string();
                        return self
                            .reply(&peer, Reply::error(Some(req), ErrorCode::Invalid, message));
                    }
                    let items = vec![item];
                    self.on_report(
                        peer,
                        Report {
                            req,
                            items,
                            single: true,
                        },
                    );
                }
            }
            Request::Heartbeat { req, leases } => self.on_heartbeat(peer, req, leases, now),
            Request::Extend {
                req,
                id,
                attempt,
                by_ms,
            } => {
                let by = match hopper_core::limits::duration_ms("by_ms", by_ms) {
                    Ok(by) => by,
                    Err(e) => {
                        let message = e.to_string();
                        return self
                            .reply(&peer, Reply::error(Some(req), ErrorCode::Invalid, message));
                    }
                };
                if self.refuse_if_held_elsewhere(&peer, req, id, "an extend") {
                    return;
                }
                let grace = self.config.heartbeat * 2;
                // Only the held attempt's timeout moves: another attempt's extend is lost.
                if let Some(held) = self.peers.held_mut(&peer, &id, attempt) {
                    held.deadline = Some(now + by + grace);
                }
                // One no peer holds is extended only if this server's node holds it.
                let unheld = self.peers.holder(&id).is_none();
                self.extend(
                    peer,
                    req,
                    Lease {
                        job_id: id,
                        attempt,
                    },
                    by,
                    unheld,
                );
            }
            Request::Outcomes { req, outcomes } => self.on_outcomes(peer, req, outcomes),
            Request::Log {
                req,
                id,
                attempt,
                lines,
                dropped,
            } => {
                let lease = Lease {
                    job_id: id,
                    attempt,
                };
                let now = chrono::Utc::now();
                match hopper_protocol::convert::log_append(lease, lines, dropped, now) {
                    Ok(append) => self.on_log(peer, req, append),
                    Err(e) => {
                        let reply = Reply::failure(Some(req), &e);
                        self.reply(&peer, reply);
                    }
                }
            }
            Request::JobLogs { req, id, after } => self.on_job_logs(peer, req, id, after),
            Request::Bye { req } => {
                self.peers.update(&peer, |p| {
                    p.leaving = true;
                    tracing::info!(peer = %hex(&peer), name = %p.name, held = p.held().len(), "peer said bye");
                });
                self.reply(
                    &peer,
                    Reply::Ack {
                        req,
                        result: FinishResult::Recorded,
                    },
                );
            }
            // Every other request is an admin request.
            request => {
                let req = request.req();
                let admin = self.admin_backend();
                let readings = self.config.readings.clone();
                let max_frame = self.config.max_frame;
                let reply = crate::admin::handle(admin, readings, max_frame, request);
                self.spawn_reply(peer, req, reply);
            }
        }
    }

    /// Where operators' requests run: [`ServeConfig::admin`], apart from the workers' pool,
    /// or the server's backend.
    fn admin_backend(&self) -> Arc<dyn Backend> {
        self.config
            .admin
            .clone()
            .unwrap_or_else(|| self.backend.clone())
    }

    /// Runs `work` in a task, once it is its turn among `peer`'s requests, and sends its
    /// reply, or an error reply, to `peer`. Not run if the peer's session ends first.
    fn spawn_reply<F>(&self, peer: PeerId, req: u64, work: F)
    where
        F: Future<Output = Result<Reply>> + Send + 'static,
    {
        let queued = match self.requests.try_queue(&peer) {
            Ok(queued) => queued,
            Err(busy) => return self.reply(&peer, Reply::transient(Some(req), busy)),
        };
        let out = self.out.clone();
        tokio::spawn(async move {
            let Some(_running) = queued.turn().await else {
                return;
            };
            let reply = match work.await {
                Ok(reply) => reply,
                Err(e) => {
                    if ErrorCode::from(&e) == ErrorCode::Internal {
                        tracing::warn!(error = %convert::detail(&e), "request failed");
                    }
                    Reply::failure(Some(req), &e)
                }
            };
            let _ = out.send((peer, reply)).await;
        });
    }

    /// The other connected peer that holds `id`, if any (`None` when `peer` holds it).
    fn held_elsewhere(&self, peer: &PeerId, id: JobId) -> Option<&PeerId> {
        if self.peers.held_attempt(peer, &id).is_some() {
            return None;
        }
        self.peers.holder(&id).filter(|holder| *holder != peer)
    }

    /// A peer may report, extend or log for only the orders it was sent (or, after a
    /// restart, ones no connected peer holds): anything held by another peer gets
    /// `lease_lost`, untouched, and a warning. True when refused.
    fn refuse_if_held_elsewhere(&self, peer: &PeerId, req: u64, id: JobId, what: &str) -> bool {
        let Some(holder) = self.held_elsewhere(peer, id) else {
            return false;
        };
        tracing::warn!(peer = %hex(peer), holder = %hex(holder), job_id = %id, "refused {what} for a job leased to another peer");
        let result = FinishResult::LeaseLost;
        self.reply(peer, Reply::Ack { req, result });
        true
    }

    /// Notes a job as this run's (not inherited), while inherited leases are pending.
    pub fn saw(&mut self, id: JobId) {
        if let Some(seen) = &mut self.seen {
            seen.insert(id);
        }
    }

    /// Notes that `lease`'s outcome is queued for writing. False when one already is: the
    /// new one must not be written.
    pub fn start_writing(&mut self, lease: Lease) -> bool {
        self.writing.insert((lease.job_id, lease.attempt))
    }

    /// Hands an outcome the server decided itself (a silent worker's, a timeout, a release)
    /// to the batching writer, unless an outcome for the same lease is already queued.
    pub fn queue_own_finish(&mut self, finish: Finish) {
        if self.start_writing(finish.lease) {
            self.queue_finishes(vec![finish], ReplyTo::Nobody, None);
        }
    }

    /// Hands outcomes to the batching writer, with the place in flight they hold, if any.
    /// Never blocks the loop: when the queue is full, a task waits for room instead. Those
    /// tasks are bounded as what they carry is: the server's own outcomes and held orders'
    /// by the orders sent, unheld leases' by their peers' places in flight.
    pub fn queue_finishes(&self, finishes: Vec<Finish>, reply_to: ReplyTo, place: Option<Permit>) {
        let finisher = self.finisher.clone();
        let item = FinishItem {
            finishes,
            reply_to,
            place,
        };
        if let Err(mpsc::error::TrySendError::Full(item)) = finisher.try_send(item) {
            tokio::spawn(async move {
                let _ = finisher.send(item).await;
            });
        }
    }

    fn on_cancelled(&mut self, id: JobId) {
        if let Some(peer) = self.peers.holder(&id).cloned() {
            self.peers.release(&peer, &id);
            self.reply(&peer, Reply::Cancel { id });
        }
    }
}

/// Wakes the loop for the queues of jobs due now that a peer submitted: the server
/// inserted them, so it need not wait for its own notification to come back.
fn wake(events: &mpsc::Sender<Event>, jobs: &[hopper_core::NewJob]) {
    let now = chrono::Utc::now();
    let mut woken: Vec<&str> = Vec::new();
    for job in jobs.iter().filter(|j| j.run_at.is_none_or(|at| at <= now)) {
        if !woken.contains(&job.queue.as_str()) {
            woken.push(&job.queue);
            let _ = events.try_send(Event::Wakeup(Wakeup::Jobs(job.queue.clone())));
        }
    }
}

/// Whether a frame of a peer whose connection closed is still handled: its outcomes, log
/// lines and bye, which must not be lost. Its other requests are dropped unread: nobody
/// is left to answer, and its turns are not to be spent on them.
fn kept_when_closed(frame: &[u8]) -> bool {
    let kept = [
        "completed",
        "failed",
        "snoozed",
        "released",
        "outcomes",
        "log",
        "bye",
    ];
    hopper_protocol::envelope(frame)
        .and_then(|e| e.ty.flatten())
        .is_some_and(|ty| kept.contains(&ty.as_str()))
}

/// A routing id for logs.
pub(crate) fn hex(peer: &[u8]) -> String {
    peer.iter().take(8).map(|b| format!("{b:02x}")).collect()
}
