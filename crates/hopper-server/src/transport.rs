//! The server's one ZeroMQ socket, on libzmq, in a thread of its own bridged to the tokio
//! event loop by channels.
//!
//! libzmq sockets belong to one thread at a time, so a single I/O thread owns the ROUTER
//! and everything that waits on it, and sleeps in `zmq_poll` on five sockets:
//!
//! - the ROUTER, the only listening socket: each message it reads goes to its peer's queue
//!   in the [`inbox`], whose queues the loop takes in turn, and which stops the reading
//!   while a peer has many frames waiting;
//! - the wake-up, an inproc PAIR: the loop says there that the inbox has room again after
//!   the I/O thread stopped reading;
//! - the outbox, an inproc PAIR: the sender thread writes `[peer, frame]` there and the I/O
//!   thread forwards it to the ROUTER, so a reply wakes the poll at once (no polling
//!   interval on the hot path);
//! - the ZAP handler, an inproc REP that libzmq asks before completing a handshake
//!   ([`gate`]: refuses past the connection cap);
//! - the socket monitor, an inproc PAIR: accepted and closed connections (the count the cap
//!   is checked against) and failed handshakes (logged, rate-limited).
//!
//! **Which peer's connection closed.** A monitor event names a file descriptor and the
//! listening endpoint, never the ROUTER routing id of the peer, and libzmq's safe API gives
//! no way to learn the descriptor a message came from. So a closed connection is told to
//! the loop as [`Event::ConnectionClosed`], and the loop sends its workers a probe (an
//! unsolicited `heartbeat_ack` with nothing lost, which every peer ignores). With
//! `ZMQ_ROUTER_MANDATORY`, a message to a routing id whose connection is gone fails with
//! `EHOSTUNREACH` at once: that is reported as [`Event::PeerGone`], for probes and orders
//! alike, and the loop ends that peer's session.
//!
//! What libzmq does for us: `ZMQ_MAXMSGSIZE` closes a connection whose frame announces
//! more than the limit before anything is allocated for it; `ZMQ_HANDSHAKE_IVL` closes
//! connections that do not complete their handshake in time; TCP keepalive closes
//! connections to machines that vanished; high-water marks bound what is queued per peer;
//! CURVE encrypts and authenticates the server when it has a key pair.

mod gate;
mod inbox;

use std::time::Duration;

use bytes::Bytes;
use hopper_protocol::{Reply, encode};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::ServerKeys;
use crate::server::{Event, PeerId, hex};
pub(crate) use inbox::Frames;

/// How long the I/O thread sleeps in `zmq_poll` at most: the delay before it sees `stop`.
const POLL_MS: i64 = 100;
/// Most messages moved in one direction per wake-up, so neither starves the other.
const BURST: usize = 1024;
/// Messages queued per peer in each direction before libzmq stops reading from it (inbound)
/// or the server drops what it sends (outbound).
const PEER_HWM: i32 = 1000;
/// Replies queued between the sender thread and the I/O thread.
const OUTBOX_HWM: i32 = 100_000;

/// How the socket is set up.
pub(crate) struct Settings {
    pub listen: String,
    /// Frames above this close their connection (libzmq's `ZMQ_MAXMSGSIZE`).
    pub max_message: usize,
    pub handshake_timeout: Duration,
    pub max_connections: usize,
    pub curve: Option<ServerKeys>,
}

/// The bound socket, the threads that serve it, and the frames it reads.
pub(crate) struct Bound {
    pub endpoint: String,
    pub tasks: Vec<JoinHandle<()>>,
    pub frames: Frames,
}

fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

/// Binds the ROUTER and starts the I/O and sender threads. Frames read go to the returned
/// [`Frames`], what else happens to `events`; replies are taken from `out`; both threads
/// end after `stop`.
pub(crate) fn start(
    settings: &Settings,
    events: mpsc::Sender<Event>,
    out: mpsc::Receiver<(PeerId, Reply)>,
    stop: CancellationToken,
) -> Result<Bound, String> {
    let context = zmq::Context::new();
    let fail = |what: &str, e: zmq::Error| format!("{what}: {e}");
    seed_anonymous_routing_ids();
    let router = context
        .socket(zmq::ROUTER)
        .map_err(|e| fail("creating the socket", e))?;
    configure(&router, settings).map_err(|e| fail("setting socket options", e))?;
    // The ZAP handler is bound before the ROUTER so that no handshake skips it.
    let zap = context
        .socket(zmq::REP)
        .map_err(|e| fail("creating the ZAP handler", e))?;
    zap.bind("inproc://zeromq.zap.01")
        .map_err(|e| fail("binding the ZAP handler", e))?;
    let monitor_endpoint = format!("inproc://hopper-monitor-{}", uuid::Uuid::now_v7());
    let events_wanted = [
        zmq::SocketEvent::ACCEPTED,
        zmq::SocketEvent::ACCEPT_FAILED,
        zmq::SocketEvent::DISCONNECTED,
        zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL,
        zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL,
    ]
    .iter()
    .fold(0, |all, e| all | i32::from(e.to_raw()));
    router
        .monitor(&monitor_endpoint, events_wanted)
        .map_err(|e| fail("monitoring the socket", e))?;
    let monitor = context
        .socket(zmq::PAIR)
        .map_err(|e| fail("creating the monitor", e))?;
    // A flood of connections is a flood of events: a deep queue, so that none is dropped
    // (the connection count would drift).
    monitor
        .set_rcvhwm(OUTBOX_HWM)
        .map_err(|e| fail("setting monitor options", e))?;
    monitor
        .connect(&monitor_endpoint)
        .map_err(|e| fail("connecting the monitor", e))?;
    router.bind(&settings.listen).map_err(|e| e.to_string())?;
    let endpoint = match router.get_last_endpoint() {
        Ok(Ok(endpoint)) => endpoint,
        _ => settings.listen.clone(),
    };
    let (replies, outbox) = inproc_pair(&context, "outbox", OUTBOX_HWM)?;
    outbox
        .set_sndtimeo(i32::try_from(POLL_MS).unwrap_or(100))
        .map_err(|e| fail("setting outbox options", e))?;
    // At most one wake-up is ever unread: the I/O thread is woken once per pause.
    let (woken, waker) = inproc_pair(&context, "wake-up", 16)?;
    let frames = std::sync::Arc::new(inbox::Inbox::default());
    let io = IoThread {
        router,
        replies,
        zap,
        monitor,
        woken,
        frames: frames.clone(),
        events,
        gate: gate::Gate::new(settings.max_connections),
        drops: gate::Throttle::default(),
        closed: false,
    };
    let io_stop = stop.clone();
    let tasks = vec![
        tokio::task::spawn_blocking(move || io.run(&io_stop)),
        tokio::task::spawn_blocking(move || send(&outbox, out, &stop)),
    ];
    let frames = Frames::new(frames, inbox::Waker(waker));
    Ok(Bound {
        endpoint,
        tasks,
        frames,
    })
}

/// Two PAIR sockets joined in-process, queueing up to `hwm` messages each way, not
/// lingering: the first bound (for the I/O thread), the second connected to it.
fn inproc_pair(
    context: &zmq::Context,
    what: &str,
    hwm: i32,
) -> Result<(zmq::Socket, zmq::Socket), String> {
    let fail = |doing: &str, e: zmq::Error| format!("{doing} the {what}: {e}");
    let endpoint = format!("inproc://hopper-{what}-{}", uuid::Uuid::now_v7());
    let bound = context.socket(zmq::PAIR).map_err(|e| fail("creating", e))?;
    let connected = context.socket(zmq::PAIR).map_err(|e| fail("creating", e))?;
    for s in [&bound, &connected] {
        s.set_sndhwm(hwm)
            .and_then(|()| s.set_rcvhwm(hwm))
            .and_then(|()| s.set_linger(0))
            .map_err(|e| fail("setting options of", e))?;
    }
    bound.bind(&endpoint).map_err(|e| fail("binding", e))?;
    connected
        .connect(&endpoint)
        .map_err(|e| fail("connecting", e))?;
    Ok((bound, connected))
}

/// Makes the routing ids libzmq gives peers that choose none unpredictable.
///
/// libzmq numbers such peers `0x00` and a 32-bit counter that starts at `rand()`, which
/// nothing in the process seeds: every server started at `0x006b8b4567`. libzmq never
/// checks a number it hands out against the ids peers chose for themselves, and a clash
/// aborts the process (`socket_base.cpp`, `zmq_assert`): a peer that claimed the next few
/// numbers stopped the server as soon as anyone else connected. Seeded here, just before
/// the ROUTER reads `rand()`, the counter starts at one of 2^32 places nobody can predict;
/// the server never shows a routing id to peers (an unnamed peer is named `unnamed`), so
/// an attacker must guess. docs/deployment.md gives what is left of the risk.
#[allow(unsafe_code)]
fn seed_anonymous_routing_ids() {
    let seed: u32 = rand::random();
    // SAFETY: srand only sets the state of the C library's generator, whose calls glibc
    // serialises; no memory is handed over.
    unsafe { libc::srand(seed) }
}

/// The ROUTER's options: limits, timeouts, keepalive, CURVE.
fn configure(router: &zmq::Socket, settings: &Settings) -> zmq::Result<()> {
    router.set_maxmsgsize(i64::try_from(settings.max_message).unwrap_or(i64::MAX))?;
    router.set_handshake_ivl(millis(settings.handshake_timeout))?;
    // No ZMTP PINGs from the server (libzmq's default, said here on purpose). libzmq 4.3
    // cancels a timer by walking all of its I/O thread's timers, and a PING arms one per
    // connection that the next message cancels: with 5,000 peers that walk took two thirds
    // of the server's CPU and queued every message behind it (docs/benchmarks.md). Silent
    // peers are dropped by the protocol's heartbeat (three periods), closed connections are
    // seen by the monitor, and the kernel's TCP keepalive closes connections to machines
    // that vanished, without a timer in libzmq. Peers' own PINGs are still answered.
    router.set_heartbeat_ivl(0)?;
    router.set_tcp_keepalive(1)?;
    router.set_tcp_keepalive_idle(60)?;
    router.set_tcp_keepalive_intvl(10)?;
    router.set_tcp_keepalive_cnt(3)?;
    router.set_rcvhwm(PEER_HWM)?;
    router.set_sndhwm(PEER_HWM)?;
    // A reply to a peer that is gone, or not reading, fails at once instead of blocking.
    router.set_router_mandatory(true)?;
    router.set_linger(500)?;
    router.set_backlog(1024)?;
    // With a ZAP domain, libzmq asks the ZAP handler about plaintext peers too.
    router.set_zap_domain("hopper")?;
    if let Some(keys) = &settings.curve {
        router.set_curve_server(true)?;
        router.set_curve_secretkey(keys.secret.as_bytes())?;
    }
    Ok(())
}

/// The sockets and channels of the I/O thread.
struct IoThread {
    router: zmq::Socket,
    replies: zmq::Socket,
    zap: zmq::Socket,
    monitor: zmq::Socket,
    /// Where the loop wakes the thread when [`IoThread::frames`] has room again.
    woken: zmq::Socket,
    /// The frames read, for the loop.
    frames: std::sync::Arc<inbox::Inbox>,
    events: mpsc::Sender<Event>,
    gate: gate::Gate,
    drops: gate::Throttle,
    /// A connection closed and the loop has not been told yet (its queue was full).
    closed: bool,
}

impl IoThread {
    fn run(mut self, stop: &CancellationToken) {
        while !stop.is_cancelled() {
            let mut items = [
                self.woken.as_poll_item(zmq::POLLIN),
                self.replies.as_poll_item(zmq::POLLIN),
                self.zap.as_poll_item(zmq::POLLIN),
                self.monitor.as_poll_item(zmq::POLLIN),
                self.router.as_poll_item(zmq::POLLIN),
            ];
            // While the inbox has no room the ROUTER is left out of the poll, not merely
            // polled for nothing: polling it makes libzmq take the next message of its
            // fair queue ahead, which would be chosen before the peers whose messages
            // arrive during the pause. Its peers' messages wait in libzmq meanwhile.
            let polled = if self.frames.may_read() { 5 } else { 4 };
            if let Err(e) = zmq::poll(&mut items[..polled], POLL_MS) {
                if e == zmq::Error::ETERM {
                    return;
                }
                continue;
            }
            let ready = items.map(|i| i.is_readable());
            if ready[0] {
                while self.woken.recv_bytes(zmq::DONTWAIT).is_ok() {}
            }
            if ready[3] {
                while let Ok(frames) = self.monitor.recv_multipart(zmq::DONTWAIT) {
                    self.closed |= self.gate.on_monitor(&frames);
                }
            }
            // One event however many closed: the loop probes every worker for each.
            if self.closed {
                self.closed = matches!(
                    self.events.try_send(Event::ConnectionClosed),
                    Err(mpsc::error::TrySendError::Full(_))
                );
            }
            if ready[2] {
                while let Ok(request) = self.zap.recv_multipart(zmq::DONTWAIT) {
                    let reply = self.gate.on_zap(&request);
                    if let Err(e) = self.zap.send_multipart(reply, 0) {
                        tracing::error!(error = %e, "answering a ZAP request failed");
                    }
                }
            }
            if ready[4] {
                self.receive();
            }
            if ready[1] {
                self.forward();
            }
        }
    }

    /// Queues the ROUTER's messages for the loop, until the inbox has no room.
    fn receive(&mut self) {
        for _ in 0..BURST {
            let Ok(mut frames) = self.router.recv_multipart(zmq::DONTWAIT) else {
                return;
            };
            // The routing id comes first; an empty delimiter may sit before the CBOR frame.
            if frames.len() < 2 {
                continue;
            }
            let Some(frame) = frames.pop() else { continue };
            let peer = Bytes::from(frames.swap_remove(0));
            if !self.frames.push(peer, Bytes::from(frame)) {
                return;
            }
        }
    }

    /// Writes the replies waiting in the outbox to the ROUTER.
    fn forward(&mut self) {
        for _ in 0..BURST {
            let Ok(message) = self.replies.recv_multipart(zmq::DONTWAIT) else {
                return;
            };
            let id = message.first().cloned().unwrap_or_default();
            match self.router.send_multipart(message, zmq::DONTWAIT) {
                Ok(()) => {}
                Err(zmq::Error::EHOSTUNREACH) => {
                    tracing::debug!(peer = %hex(&id), "a reply to a peer that is gone was dropped");
                    // If the loop is behind, its silence sweep finds the peer instead.
                    let _ = self.events.try_send(Event::PeerGone(Bytes::from(id)));
                }
                Err(e) => {
                    if let Some(more) = self.drops.allow("send") {
                        tracing::warn!(peer = %hex(&id), error = %e, more, "peer not reading; message dropped");
                    }
                }
            }
        }
    }
}

/// Encodes replies and hands them to the I/O thread, until every sender of `out` is gone or
/// `stop` while the I/O thread no longer reads.
fn send(outbox: &zmq::Socket, mut out: mpsc::Receiver<(PeerId, Reply)>, stop: &CancellationToken) {
    while let Some((peer, reply)) = out.blocking_recv() {
        let frame = match encode(&reply) {
            Ok(frame) => frame,
            Err(e) => {
                tracing::error!(error = %e, "encoding a reply failed");
                continue;
            }
        };
        loop {
            match outbox.send_multipart([&peer[..], &frame[..]], 0) {
                Ok(()) => break,
                Err(zmq::Error::EAGAIN) if !stop.is_cancelled() => {}
                Err(_) => return,
            }
        }
    }
}
