//! The DEALER socket of a [`super::RemoteBackend`], on libzmq, in a thread of its own.
//!
//! libzmq connects, reconnects after the server went away (every 100 ms at first, backing
//! off to 2 s), detects a dead connection with ZMTP heartbeats and TCP keepalive, and does
//! the CURVE handshake when the options carry the server's public key (with a key pair of
//! this socket's own, made when it is created). The socket is set `ZMQ_IMMEDIATE`: while no
//! connection is up, a message is not queued for later but reported [`Incoming::Unsent`],
//! so the connection task knows to say hello again rather than having stale requests
//! delivered to a server that restarted.
//!
//! The I/O thread sleeps in `zmq_poll` on the DEALER, an inproc PAIR that the connection
//! task writes to (a send wakes it at once) and the socket monitor (failed handshakes, so a
//! wrong server key is reported as such rather than as an unreachable server).

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use hopper_core::{Error, Result};
use tokio::sync::mpsc;

use super::RemoteOptions;

/// How long the I/O thread sleeps in `zmq_poll` at most: the delay before it notices that
/// the connection task is gone.
const POLL_MS: i64 = 100;
/// Most messages moved in one direction per wake-up.
const BURST: usize = 1024;

/// What the I/O thread reports.
#[derive(Debug)]
pub(super) enum Incoming {
    /// A frame from the server.
    Frame(Bytes),
    /// A message could not be sent: no connection to the server is up.
    Unsent,
    /// A connection to the server completed its handshake (the first one, or after the
    /// server went away): a hello sent before it was not sent.
    Up,
    /// The server refused this socket's handshake, for the reason given.
    Refused(&'static str),
}

/// The socket, as the connection task sees it.
pub(super) struct Link {
    outbox: zmq::Socket,
    incoming: mpsc::Receiver<Incoming>,
}

/// One libzmq context (and its I/O thread) for every socket of the process.
fn context() -> &'static zmq::Context {
    static CONTEXT: OnceLock<zmq::Context> = OnceLock::new();
    CONTEXT.get_or_init(zmq::Context::new)
}

fn millis(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}

/// A settings error: the options are wrong, retrying will not help.
fn invalid(what: &str, e: zmq::Error) -> Error {
    Error::InvalidInput(format!("{what}: {e}"))
}

impl Link {
    /// Creates the socket, starts connecting and starts the I/O thread.
    pub fn open(options: &RemoteOptions) -> Result<Link> {
        let dealer = context()
            .socket(zmq::DEALER)
            .map_err(|e| invalid("creating a socket", e))?;
        configure(&dealer, options).map_err(|e| invalid("setting socket options", e))?;
        let monitor_endpoint = format!("inproc://hopper-monitor-{}", uuid::Uuid::now_v7());
        let wanted = i32::from(zmq::SocketEvent::HANDSHAKE_SUCCEEDED.to_raw())
            | i32::from(zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL.to_raw())
            | i32::from(zmq::SocketEvent::HANDSHAKE_FAILED_AUTH.to_raw())
            | i32::from(zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL.to_raw());
        dealer
            .monitor(&monitor_endpoint, wanted)
            .map_err(|e| invalid("monitoring the socket", e))?;
        let monitor = context()
            .socket(zmq::PAIR)
            .map_err(|e| invalid("creating the monitor", e))?;
        monitor
            .connect(&monitor_endpoint)
            .map_err(|e| invalid("connecting the monitor", e))?;
        dealer.connect(&options.endpoint).map_err(|e| {
            Error::InvalidInput(format!("cannot connect to {}: {e}", options.endpoint))
        })?;
        let inbox_endpoint = format!("inproc://hopper-outbox-{}", uuid::Uuid::now_v7());
        let inbox = context()
            .socket(zmq::PAIR)
            .map_err(|e| invalid("creating the outbox", e))?;
        let outbox = context()
            .socket(zmq::PAIR)
            .map_err(|e| invalid("creating the outbox", e))?;
        for s in [&inbox, &outbox] {
            s.set_linger(0)
                .map_err(|e| invalid("setting outbox options", e))?;
        }
        inbox
            .bind(&inbox_endpoint)
            .map_err(|e| invalid("binding the outbox", e))?;
        outbox
            .connect(&inbox_endpoint)
            .map_err(|e| invalid("connecting the outbox", e))?;
        let (tx, incoming) = mpsc::channel(1024);
        let io = IoThread {
            dealer,
            inbox,
            monitor,
            incoming: tx,
            curve: options.server_key.is_some(),
        };
        std::thread::Builder::new()
            .name("hopper-zmq".to_owned())
            .spawn(move || io.run())
            .map_err(|e| Error::InvalidInput(format!("starting the socket's thread: {e}")))?;
        Ok(Link { outbox, incoming })
    }

    /// Hands a frame to the I/O thread. Fails only if the thread is gone or far behind.
    pub fn send(&self, frame: &[u8]) -> Result<()> {
        self.outbox.send(frame, zmq::DONTWAIT).map_err(|e| {
            super::connection::unavailable(format!("sending to the hopper server: {e}"))
        })
    }

    /// The next frame or event; `None` when the I/O thread ended.
    pub async fn recv(&mut self) -> Option<Incoming> {
        self.incoming.recv().await
    }
}

/// The DEALER's options: reconnection, timeouts, heartbeats, CURVE.
fn configure(dealer: &zmq::Socket, options: &RemoteOptions) -> zmq::Result<()> {
    let heartbeat = Duration::from_millis(hopper_protocol::DEFAULT_HEARTBEAT_MS);
    dealer.set_immediate(true)?;
    dealer.set_reconnect_ivl(100)?;
    dealer.set_reconnect_ivl_max(2000)?;
    dealer.set_connect_timeout(2000)?;
    dealer.set_handshake_ivl(5000)?;
    dealer.set_heartbeat_ivl(millis(heartbeat))?;
    dealer.set_heartbeat_timeout(millis(heartbeat * 3))?;
    dealer.set_tcp_keepalive(1)?;
    dealer.set_tcp_keepalive_idle(60)?;
    dealer.set_tcp_keepalive_intvl(10)?;
    dealer.set_tcp_keepalive_cnt(3)?;
    // Outcomes written just before the backend is dropped still leave.
    dealer.set_linger(1000)?;
    if let Some(server_key) = &options.server_key {
        let mine = zmq::CurveKeyPair::new()?;
        dealer.set_curve_serverkey(server_key.as_bytes())?;
        dealer.set_curve_publickey(&mine.public_key)?;
        dealer.set_curve_secretkey(&mine.secret_key)?;
    }
    Ok(())
}

struct IoThread {
    dealer: zmq::Socket,
    inbox: zmq::Socket,
    monitor: zmq::Socket,
    incoming: mpsc::Sender<Incoming>,
    /// The socket does the CURVE handshake.
    curve: bool,
}

impl IoThread {
    /// Moves messages until the connection task is gone.
    fn run(self) {
        while !self.incoming.is_closed() {
            let mut items = [
                self.dealer.as_poll_item(zmq::POLLIN),
                self.inbox.as_poll_item(zmq::POLLIN),
                self.monitor.as_poll_item(zmq::POLLIN),
            ];
            if zmq::poll(&mut items, POLL_MS).is_err() {
                continue;
            }
            let ready = items.map(|i| i.is_readable());
            if ready[2] {
                while let Ok(frames) = self.monitor.recv_multipart(zmq::DONTWAIT) {
                    let event = match refusal(&frames, self.curve) {
                        Some(Ok(())) => Incoming::Up,
                        Some(Err(reason)) => Incoming::Refused(reason),
                        None => continue,
                    };
                    if self.report(event).is_err() {
                        return;
                    }
                }
            }
            if ready[0] {
                for _ in 0..BURST {
                    let Ok(mut frames) = self.dealer.recv_multipart(zmq::DONTWAIT) else {
                        break;
                    };
                    let Some(frame) = frames.pop() else { continue };
                    if self.report(Incoming::Frame(Bytes::from(frame))).is_err() {
                        return;
                    }
                }
            }
            if ready[1] {
                for _ in 0..BURST {
                    let Ok(frame) = self.inbox.recv_msg(zmq::DONTWAIT) else {
                        break;
                    };
                    if self.dealer.send(frame, zmq::DONTWAIT).is_err()
                        && self.report(Incoming::Unsent).is_err()
                    {
                        return;
                    }
                }
            }
        }
    }

    fn report(&self, incoming: Incoming) -> std::result::Result<(), ()> {
        self.incoming.blocking_send(incoming).map_err(|_| ())
    }
}

/// A completed handshake, or why the server refused one, from a monitor event. A CURVE
/// server closes the connection of a peer that encrypted its hello to a wrong key without a
/// word, which the peer sees as a handshake ended with no detail.
fn refusal(frames: &[Vec<u8>], curve: bool) -> Option<std::result::Result<(), &'static str>> {
    let head = frames.first().filter(|f| f.len() >= 6)?;
    let event = u16::from_le_bytes([head[0], head[1]]);
    let value = u32::from_le_bytes([head[2], head[3], head[4], head[5]]);
    Some(Err(match zmq::SocketEvent::from_raw(event) {
        zmq::SocketEvent::HANDSHAKE_SUCCEEDED => return Some(Ok(())),
        zmq::SocketEvent::HANDSHAKE_FAILED_AUTH => {
            "the server refused the connection (too many connections?)"
        }
        zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL => match value {
            0x1100_0001 | 0x1000_0003 => "the CURVE handshake failed: wrong server_key?",
            0x1100_0002 => {
                "security mismatch: the server uses CURVE and no server_key was given, or the reverse"
            }
            _ => "the server refused the ZeroMQ handshake",
        },
        zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL if curve => {
            "the server closed the connection during the CURVE handshake: wrong server_key?"
        }
        _ => return None,
    }))
}
