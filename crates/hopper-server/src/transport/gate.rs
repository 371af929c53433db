//! Who gets in: the socket monitor counts connections, the ZAP handler refuses handshakes
//! past the cap, and what peers get wrong is logged at most once per kind per period.
//!
//! libzmq reports every accepted and every closed connection on the monitor, and asks the
//! ZAP handler (RFC 27, an inproc REP socket in the server's context) before it completes
//! any handshake. A connection that never completes one is closed by libzmq itself after
//! `ZMQ_HANDSHAKE_IVL`; one that completes it while the server holds `cap` connections is
//! refused there (status 400) and closed. The count is of accepted connections, so a flood
//! of idle ones fills it too and ends within a handshake period.

use std::collections::HashMap;
use std::time::Duration;

use hopper_core::log_limit::LogThrottle;

/// How often one kind of refusal may be logged.
const LOG_PERIOD: Duration = Duration::from_secs(10);

/// Counts connections and answers ZAP requests.
pub(super) struct Gate {
    connections: usize,
    cap: usize,
    /// The cap was reached and said so; said again only after the count fell below it.
    full: bool,
    logs: Throttle,
}

impl Gate {
    pub fn new(cap: usize) -> Self {
        Gate {
            connections: 0,
            cap,
            full: false,
            logs: Throttle::default(),
        }
    }

    /// Handles one monitor event (two frames: event and value, then the endpoint); true
    /// when it says that a connection closed.
    pub fn on_monitor(&mut self, frames: &[Vec<u8>]) -> bool {
        let Some(head) = frames.first().filter(|f| f.len() >= 6) else {
            return false;
        };
        let event = u16::from_le_bytes([head[0], head[1]]);
        let value = u32::from_le_bytes([head[2], head[3], head[4], head[5]]);
        match zmq::SocketEvent::from_raw(event) {
            zmq::SocketEvent::ACCEPTED => self.connections += 1,
            zmq::SocketEvent::DISCONNECTED => {
                self.connections = self.connections.saturating_sub(1);
                if self.full && self.connections < self.cap {
                    self.full = false;
                    tracing::info!(
                        connections = self.connections,
                        cap = self.cap,
                        "below the connection cap again: accepting handshakes"
                    );
                }
                return true;
            }
            zmq::SocketEvent::ACCEPT_FAILED => {
                let error = std::io::Error::from_raw_os_error(value as i32);
                if let Some(more) = self.logs.allow("accept") {
                    tracing::warn!(%error, more, "accepting a connection failed (file descriptors exhausted?)");
                }
            }
            zmq::SocketEvent::HANDSHAKE_FAILED_PROTOCOL => {
                let reason = protocol_error(value);
                if let Some(more) = self.logs.allow(reason) {
                    tracing::warn!(reason, more, "refused a peer's handshake");
                }
            }
            zmq::SocketEvent::HANDSHAKE_FAILED_NO_DETAIL => {
                if let Some(more) = self.logs.allow("no detail") {
                    tracing::info!(
                        more,
                        "a peer left or timed out before completing its handshake"
                    );
                }
            }
            _ => {}
        }
        false
    }

    /// Answers one ZAP request: 200 while under the cap, 400 past it.
    pub fn on_zap(&mut self, frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let field = |i: usize| frames.get(i).cloned().unwrap_or_default();
        let (status, text): (&[u8], &[u8]) = if self.connections > self.cap {
            if !self.full {
                self.full = true;
                tracing::warn!(
                    cap = self.cap,
                    "connection cap reached: refusing new peers' handshakes until some leave"
                );
            }
            (b"400", b"too many connections")
        } else {
            (b"200", b"OK")
        };
        vec![
            b"1.0".to_vec(),
            field(1),
            status.to_vec(),
            text.to_vec(),
            Vec::new(),
            Vec::new(),
        ]
    }

    /// Connections accepted and not yet closed.
    #[cfg(test)]
    pub fn connections(&self) -> usize {
        self.connections
    }
}

/// What a `ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL` value means for an operator.
fn protocol_error(value: u32) -> &'static str {
    match value {
        0x1100_0001 => "CURVE decryption failed: the peer uses a wrong server key",
        0x1100_0002 => {
            "security mechanism mismatch: a plaintext peer on a CURVE socket, or the reverse"
        }
        0x1000_0003 => "CURVE key exchange failed",
        0x1000_0011..=0x1000_0018 => "malformed handshake command",
        0x1000_0001 | 0x1000_0002 => "unexpected handshake command",
        0x2000_0000..=0x2000_0005 => "the connection cap's handler failed",
        _ => "ZMTP protocol error",
    }
}

/// At most one log line per kind per [`LOG_PERIOD`], kinds being told apart by name.
#[derive(Default)]
pub(super) struct Throttle {
    kinds: HashMap<&'static str, LogThrottle>,
}

impl Throttle {
    /// `Some(n)` when a line may be logged now, `n` being how many were held back since
    /// the last one; `None` to stay quiet.
    pub fn allow(&mut self, kind: &'static str) -> Option<u64> {
        self.kinds
            .entry(kind)
            .or_insert_with(|| LogThrottle::new(LOG_PERIOD))
            .check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: zmq::SocketEvent, value: u32) -> Vec<Vec<u8>> {
        let mut head = kind.to_raw().to_le_bytes().to_vec();
        head.extend(value.to_le_bytes());
        vec![head, b"tcp://127.0.0.1:1".to_vec()]
    }

    fn status(reply: &[Vec<u8>]) -> &[u8] {
        &reply[2]
    }

    #[test]
    fn handshakes_past_the_cap_are_refused_until_peers_leave() {
        let mut gate = Gate::new(2);
        let zap = vec![b"1.0".to_vec(), b"id-7".to_vec()];
        for _ in 0..3 {
            assert!(!gate.on_monitor(&event(zmq::SocketEvent::ACCEPTED, 9)));
        }
        let refused = gate.on_zap(&zap);
        assert_eq!(status(&refused), b"400");
        assert_eq!(refused[1], b"id-7", "the request id is echoed");
        assert!(gate.on_monitor(&event(zmq::SocketEvent::DISCONNECTED, 9)));
        assert_eq!(gate.connections(), 2);
        assert_eq!(status(&gate.on_zap(&zap)), b"200");
        for _ in 0..5 {
            gate.on_monitor(&event(zmq::SocketEvent::DISCONNECTED, 9));
        }
        assert_eq!(gate.connections(), 0, "never below zero");
    }

    #[test]
    fn a_kind_of_refusal_is_logged_once_per_period() {
        let mut throttle = Throttle::default();
        assert_eq!(throttle.allow("protocol"), Some(0));
        for _ in 0..1000 {
            assert_eq!(throttle.allow("protocol"), None);
        }
        assert_eq!(throttle.allow("accept"), Some(0), "kinds are apart");
    }
}
