//! The connection task of a [`super::RemoteBackend`]: one DEALER socket to the server,
//! recreated whenever the server goes quiet.
//!
//! zmq.rs's DEALER does not reconnect by itself, so this task watches for silence: it sends a
//! heartbeat (listing every lease it holds) each period the server announced in its
//! `welcome`, and when nothing at all has arrived for three periods, or the server answers
//! `unauthorized` (it restarted and forgot the session), it drops the socket, connects a new
//! one and says hello again. Requests in flight then fail with a transient error, which the
//! runtime's completer retries; leases survive, since they live in the database.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hopper_core::{ClaimedJob, Error, Lease, Priority, Result, Wakeup};
use hopper_protocol::{
    ErrorCode, LeaseRef, Order, Reply, Request, Role, VERSION, decode_reply, encode,
};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use zeromq::{DealerSocket, Socket, SocketOptions, SocketRecv, SocketSend, ZmqMessage};

use super::Shared;

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

fn hello(shared: &Shared, req: u64) -> Request {
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

/// One live socket: its send half and the frames its receiver forwards.
struct Link {
    send: zeromq::DealerSendHalf,
    frames: mpsc::Receiver<Bytes>,
    reader: tokio::task::JoinHandle<()>,
    heartbeat: Duration,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

async fn send(link: &mut Link, request: &Request) -> Result<()> {
    let frame = encode(request).map_err(|e| Error::InvalidInput(format!("encoding: {e}")))?;
    tokio::time::timeout(
        Duration::from_secs(5),
        link.send.send(ZmqMessage::from(frame)),
    )
    .await
    .map_err(|_| unavailable("sending to the hopper server timed out"))?
    .map_err(|e| unavailable(format!("sending to the hopper server: {e}")))
}

/// Connects and says hello; retries until it succeeds or the backend is dropped. Requests
/// made meanwhile fail at once with the latest reason (a refused token is not transient).
async fn open(shared: &Shared, commands: &mut mpsc::Receiver<Command>) -> Option<Link> {
    let mut backoff = Duration::from_millis(50);
    loop {
        let (refused, reason) = match try_open(shared).await {
            Ok(link) => return Some(link),
            Err(Error::InvalidInput(message)) => (true, message),
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

async fn try_open(shared: &Shared) -> Result<Link> {
    let mut options = SocketOptions::default();
    options.connect_timeout(Duration::from_secs(2));
    let mut socket = DealerSocket::with_options(options);
    socket
        .connect(&shared.options.endpoint)
        .await
        .map_err(|e| unavailable(format!("connecting: {e}")))?;
    let (send_half, mut recv_half) = socket.split();
    let (tx, frames) = mpsc::channel(1024);
    let reader = tokio::spawn(async move {
        while let Ok(message) = recv_half.recv().await {
            let Some(frame) = message.into_vec().pop() else {
                continue;
            };
            if tx.send(frame).await.is_err() {
                return;
            }
        }
    });
    let mut link = Link {
        send: send_half,
        frames,
        reader,
        heartbeat: Duration::from_millis(hopper_protocol::DEFAULT_HEARTBEAT_MS),
    };
    let req = shared.next_req();
    send(&mut link, &hello(shared, req)).await?;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let frame = tokio::time::timeout_at(deadline, link.frames.recv())
            .await
            .map_err(|_| unavailable("no welcome from the hopper server within 5 s"))?
            .ok_or_else(|| unavailable("the connection closed during hello"))?;
        match decode_reply(&frame, usize::MAX) {
            Ok(Reply::Welcome { heartbeat_ms, .. }) => {
                link.heartbeat = Duration::from_millis(heartbeat_ms.max(10));
                return Ok(link);
            }
            Ok(Reply::Error { code, message, .. }) => {
                let e = format!("the hopper server refused hello: {code}: {message}");
                return Err(if code == ErrorCode::Unauthorized {
                    Error::InvalidInput(e)
                } else {
                    unavailable(e)
                });
            }
            _ => {}
        }
    }
}

/// Runs until the backend (every sender of `commands`) is dropped.
pub(super) async fn run(shared: Arc<Shared>, mut commands: mpsc::Receiver<Command>) {
    let mut first = true;
    loop {
        let Some(mut link) = open(&shared, &mut commands).await else {
            return;
        };
        if !first {
            tracing::info!(endpoint = %shared.options.endpoint, "reconnected to the hopper server");
            let _ = shared.wakeups.send(Wakeup::Resync);
        }
        first = false;
        shared.hello_sent(shared.hello_info());
        if !serve(&shared, &mut link, &mut commands).await {
            return;
        }
    }
}

/// Serves one link. Returns false when the backend is gone, true to reconnect.
async fn serve(shared: &Shared, link: &mut Link, commands: &mut mpsc::Receiver<Command>) -> bool {
    let mut pending: HashMap<u64, (Instant, oneshot::Sender<Result<Reply>>)> = HashMap::new();
    let mut last_heard = Instant::now();
    let mut tick = tokio::time::interval(link.heartbeat);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let timeout = shared.options.request_timeout;
    let reason = loop {
        tokio::select! {
            command = commands.recv() => {
                let Some(Command { request, reply }) = command else { return false };
                if let Request::Hello { .. } = request {
                    shared.hello_sent(shared.hello_info());
                }
                let req = request.req();
                match send(link, &request).await {
                    Ok(()) => { pending.insert(req, (Instant::now() + timeout, reply)); }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        break "a send failed";
                    }
                }
            }
            frame = link.frames.recv() => {
                let Some(frame) = frame else { break "the connection closed" };
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
                if last_heard.elapsed() > link.heartbeat * 3 {
                    break "the server went silent";
                }
                let now = Instant::now();
                pending.retain(|_, (deadline, _)| *deadline > now);
                let leases = shared.held_leases();
                let heartbeat = Request::Heartbeat { req: shared.next_req(), leases };
                if send(link, &heartbeat).await.is_err() {
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
        Reply::Order { job } => shared.push_orders(vec![claimed(job)]),
        Reply::Orders { jobs } => shared.push_orders(jobs.into_iter().map(claimed).collect()),
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
            None => tracing::debug!(?reply, "a reply nobody waits for"),
        },
    }
    None
}

/// An order as the runtime takes it.
fn claimed(job: Order) -> ClaimedJob {
    ClaimedJob {
        lease: Lease {
            job_id: job.id,
            attempt: job.attempt,
        },
        queue: job.queue,
        kind: job.kind,
        args: job.args,
        priority: Priority(job.priority),
        counted_attempt: job.counted_attempt,
        max_attempts: job.max_attempts,
        timeout: Duration::from_millis(job.timeout_ms),
        created_at: job.created_at,
        run_at: job.run_at,
    }
}
