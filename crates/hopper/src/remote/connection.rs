//! The connection task of a [`super::RemoteBackend`]: says hello over the backend's one
//! socket ([`super::socket`]), then matches replies to requests, forwards orders and
//! cancellations, and heartbeats.
//!
//! libzmq reconnects the socket by itself; this task says hello again whenever the server
//! may have forgotten the session: a message could not be sent (no connection was up),
//! nothing at all arrived for three heartbeat periods, or the server answered
//! `unauthorized` (it restarted). Requests in flight then fail with a transient error, which
//! the runtime's completer retries; leases survive, since they live in the database.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hopper_core::limits::MAX_DURATION;
use hopper_core::{ClaimedJob, Error, Lease, Result, Wakeup};
use hopper_protocol::{ErrorCode, LeaseRef, Reply, Request, Role, VERSION, decode_reply, encode};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::Shared;
use super::socket::{Incoming, Link};

/// A request for the connection task.
pub(super) struct Command {
    pub request: Request,
    pub reply: oneshot::Sender<Result<Reply>>,
}

/// What the hello says: changed by `node_heartbeat` when a runtime starts.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct HelloInfo {
    pub role: Role,
    pub name: Option<String>,
    pub kinds: Option<Vec<String>>,
    pub queues: Option<Vec<String>>,
    pub concurrency: Option<u32>,
    pub prefetch: Option<u32>,
}

/// A transient error: the caller may retry.
pub(super) fn unavailable(message: impl Into<String>) -> Error {
    Error::database(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        message.into(),
    ))
}

/// The hello of this backend's current registration (its role, queues, kinds, credit).
pub(super) fn hello(shared: &Shared, req: u64) -> Request {
    let info = shared.hello_info();
    Request::Hello {
        req,
        version: VERSION,
        role: info.role,
        token: shared.options.token.clone(),
        name: info.name,
        kinds: info.kinds,
        queues: info.queues,
        concurrency: info.concurrency,
        prefetch: info.prefetch,
        batch: true,
    }
}

fn send(link: &Link, request: &Request) -> Result<()> {
    let frame = encode(request).map_err(|e| Error::InvalidInput(format!("encoding: {e}")))?;
    link.send(&frame)
}

/// Says hello until the server welcomes it, or the backend is dropped (`None`). Returns the
/// heartbeat period the server announced. Requests made meanwhile fail at once with the
/// latest reason (a refused token is not transient).
async fn open(
    shared: &Shared,
    link: &mut Link,
    commands: &mut mpsc::Receiver<Command>,
) -> Option<Duration> {
    let mut backoff = Duration::from_millis(50);
    loop {
        let (refused, reason) = match try_open(shared, link).await {
            Ok(heartbeat) => return Some(heartbeat),
            Err(Error::InvalidInput(message)) => (true, message),
            // The cause alone: `unavailable` wraps it as a database error again below, and
            // its text would otherwise say "database: database: …".
            Err(Error::Database(cause)) => (false, cause.to_string()),
            Err(e) => (false, e.to_string()),
        };
        tracing::warn!(endpoint = %shared.options.endpoint, error = %reason, retry_in = ?backoff, "cannot reach the hopper server");
        let deadline = Instant::now() + backoff;
        loop {
            tokio::select! {
                c = commands.recv() => match c {
                    Some(c) => {
                        let e = if refused {
                            Error::InvalidInput(reason.clone())
                        } else {
                            unavailable(reason.clone())
                        };
                        let _ = c.reply.send(Err(e));
                    }
                    None => return None,
                },
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

/// Sends one hello and waits for its welcome (5 s at most). A hello that could not be sent
/// (no connection up yet) is sent again when a connection completes its handshake, and
/// every 25 ms meanwhile (libzmq may report the handshake a moment before the connection
/// takes messages).
async fn try_open(shared: &Shared, link: &mut Link) -> Result<Duration> {
    let mut req = shared.next_req();
    send(link, &hello(shared, req))?;
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut resend_at: Option<Instant> = None;
    loop {
        let resend = async {
            match resend_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let incoming = tokio::select! {
            incoming = tokio::time::timeout_at(deadline, link.recv()) => match incoming {
                Ok(Some(incoming)) => incoming,
                Ok(None) => return Err(unavailable("the socket's thread ended")),
                Err(_) => return Err(unavailable("no welcome from the hopper server within 5 s")),
            },
            () = resend => Incoming::Up,
        };
        let frame = match incoming {
            Incoming::Frame(frame) => frame,
            Incoming::Unsent => {
                resend_at = Some(Instant::now() + Duration::from_millis(25));
                continue;
            }
            Incoming::Up => {
                resend_at = None;
                req = shared.next_req();
                send(link, &hello(shared, req))?;
                continue;
            }
            // libzmq tries again by itself; meanwhile requests fail with the reason.
            Incoming::Refused(why) => return Err(unavailable(why)),
        };
        match decode_reply(&frame, usize::MAX) {
            Ok(Reply::Welcome { heartbeat_ms, .. }) => {
                return Ok(Duration::from_millis(heartbeat_ms.max(10)));
            }
            Ok(Reply::Error {
                code,
                message,
                req: Some(r),
                ..
            }) if r == req => {
                let e = format!("the hopper server refused hello: {code}: {message}");
                return Err(if code == ErrorCode::Unauthorized {
                    Error::InvalidInput(e)
                } else {
                    unavailable(e)
                });
            }
            // Replies to requests of before the hello: nobody waits for them any more.
            _ => {}
        }
    }
}

/// Runs until the backend (every sender of `commands`) is dropped.
pub(super) async fn run(shared: Arc<Shared>, mut commands: mpsc::Receiver<Command>) {
    let mut link = match Link::open(&shared.options) {
        Ok(link) => link,
        Err(e) => {
            tracing::error!(endpoint = %shared.options.endpoint, error = %e, "cannot create the socket");
            while let Some(c) = commands.recv().await {
                let _ = c.reply.send(Err(Error::InvalidInput(e.to_string())));
            }
            return;
        }
    };
    let mut first = true;
    loop {
        let Some(heartbeat) = open(&shared, &mut link, &mut commands).await else {
            return;
        };
        if !first {
            tracing::info!(endpoint = %shared.options.endpoint, "reconnected to the hopper server");
            let _ = shared.wakeups.send(Wakeup::Resync);
        }
        first = false;
        shared.hello_sent(shared.hello_info());
        if !serve(&shared, &mut link, heartbeat, &mut commands).await {
            return;
        }
    }
}

/// Serves one link. Returns false when the backend is gone, true to reconnect.
async fn serve(
    shared: &Shared,
    link: &mut Link,
    heartbeat: Duration,
    commands: &mut mpsc::Receiver<Command>,
) -> bool {
    let mut pending: HashMap<u64, (Instant, oneshot::Sender<Result<Reply>>)> = HashMap::new();
    let mut last_heard = Instant::now();
    let mut tick = tokio::time::interval(heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Past ten years (`MAX_DURATION`), ten years: the clock cannot add any duration.
    let timeout = shared.options.request_timeout.min(MAX_DURATION);
    let reason = loop {
        tokio::select! {
            command = commands.recv() => {
                let Some(Command { request, reply }) = command else { return false };
                if let Request::Hello { .. } = request {
                    shared.hello_sent(shared.hello_info());
                }
                let req = request.req();
                match send(link, &request) {
                    Ok(()) => { pending.insert(req, (Instant::now() + timeout, reply)); }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        break "a send failed";
                    }
                }
            }
            incoming = link.recv() => {
                let frame = match incoming {
                    Some(Incoming::Frame(frame)) => frame,
                    Some(Incoming::Unsent) => break "the connection to the server is down",
                    // A new connection: perhaps to a restarted server, which knows no session.
                    Some(Incoming::Up) => break "reconnected",
                    Some(Incoming::Refused(why)) => break why,
                    None => break "the socket's thread ended",
                };
                last_heard = Instant::now();
                match decode_reply(&frame, usize::MAX) {
                    Ok(reply) => {
                        if let Some(why) = on_reply(shared, reply, &mut pending) {
                            break why;
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "undecodable frame from the hopper server"),
                }
            }
            _ = tick.tick() => {
                if last_heard.elapsed() > heartbeat * 3 {
                    break "the server went silent";
                }
                // Requests past their time are answered so, not dropped: a dropped reply
                // reads as the client shutting down.
                let now = Instant::now();
                for (_, (_, reply)) in pending.extract_if(|_, (deadline, _)| *deadline <= now) {
                    let _ = reply.send(Err(unavailable(format!(
                        "no reply from the hopper server within {timeout:?}"
                    ))));
                }
                let leases = shared.held_leases();
                let beat = Request::Heartbeat { req: shared.next_req(), leases };
                if send(link, &beat).is_err() {
                    break "a heartbeat could not be sent";
                }
            }
        }
    };
    tracing::warn!(endpoint = %shared.options.endpoint, reason, "reconnecting to the hopper server");
    for (_, (_, reply)) in pending.drain() {
        let _ = reply.send(Err(unavailable(format!(
            "connection to the hopper server lost: {reason}"
        ))));
    }
    true
}

/// Handles one frame from the server. Returns a reason to reconnect, if any.
fn on_reply(
    shared: &Shared,
    reply: Reply,
    pending: &mut HashMap<u64, (Instant, oneshot::Sender<Result<Reply>>)>,
) -> Option<&'static str> {
    match reply {
        Reply::Order { job } => shared.push_orders(vec![ClaimedJob::from(job)]),
        Reply::Orders { jobs } => {
            shared.push_orders(jobs.into_iter().map(ClaimedJob::from).collect())
        }
        Reply::Cancel { id } => shared.cancelled(id),
        Reply::HeartbeatAck { req, lost } if !pending.contains_key(&req) => {
            for LeaseRef { id, attempt } in lost {
                shared.lost(Lease {
                    job_id: id,
                    attempt,
                });
            }
        }
        Reply::Error {
            code: ErrorCode::Unauthorized,
            req,
            ..
        } => {
            if let Some((_, tx)) = req.and_then(|r| pending.remove(&r)) {
                let _ = tx.send(Err(unavailable("the hopper server forgot this session")));
            }
            return Some("the server forgot this session (it restarted)");
        }
        reply => match reply.req().and_then(|r| pending.remove(&r)) {
            Some((_, tx)) => {
                let _ = tx.send(Ok(reply));
            }
            // Nobody waits for a heartbeat's answer: its refusal (its last one still
            // running, too many leases listed) means the leases were not extended this time.
            None if matches!(reply, Reply::Error { .. }) => {
                tracing::warn!(
                    ?reply,
                    "the hopper server refused a request sent without waiting (a heartbeat's leases are then not extended this time)"
                );
            }
            None => tracing::debug!(?reply, "a reply nobody waits for"),
        },
    }
    None
}
