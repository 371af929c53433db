//! The HTTP server's connections: how many may be open at once, how long one may take
//! to send a request's headers or stay idle between two requests, and how long its
//! responses may wait for the peer to read them.
//!
//! `axum::serve` sets neither: a peer that opens a connection and sends nothing, or half a
//! request line, or nothing more after its first request, keeps its connection, its task
//! and about 20 KiB for as long as it likes, and enough such peers use up the process's
//! file descriptors (measured: 15,000 idle connections, 330 MB, none ever closed). Here each
//! connection is served by hyper with a timer, so that [`ConnectionLimits::header_timeout`]
//! bounds both waits (hyper starts it when it begins reading a request's head, which on a
//! kept-alive connection is as soon as the last response went out), and at most
//! [`ConnectionLimits::max_connections`] are open at once: past that, new connections wait
//! in the listen backlog until one closes. A peer that stops reading its responses is cut
//! at [`ConnectionLimits::send_timeout`] ([`crate::send_timeout`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hopper::core::log_limit::LogThrottle;
use hopper::metrics::{HTTP_CONNECTIONS, HTTP_CONNECTIONS_CLOSED_TOTAL};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::send_timeout::{SendTimeout, is_stalled};
use crate::tls::Tls;

/// The defaults of [`ConnectionLimits`]: 1,024 connections, 10 s for a request's headers,
/// 30 s for a response's write to make progress.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;

/// See [`DEFAULT_MAX_CONNECTIONS`].
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// See [`DEFAULT_MAX_CONNECTIONS`].
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// The timeouts a [`ConnectionLimits`] holds: from one millisecond to
/// [`hopper::core::limits::MAX_DURATION`] (ten years).
pub const TIMEOUT_BOUNDS: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(1)..=hopper::core::limits::MAX_DURATION;

/// The pause after an accept that failed for want of resources (descriptors, memory), so
/// that the loop does not spin while none is freed.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// How long a graceful stop waits for the requests in flight before it closes their
/// connections.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// Accept errors logged per minute; the others are counted in the next line.
static ACCEPT_ERRORS: LogThrottle = LogThrottle::new(Duration::from_secs(60));

/// What the HTTP server allows each connection and all of them together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionLimits {
    /// Most connections open at once (default [`DEFAULT_MAX_CONNECTIONS`]); past it, new
    /// connections wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// Longest a connection may take to send a request's headers, counted from its opening
    /// or from the end of its last response (so also the longest it may stay idle between
    /// two requests), past which it is closed (default [`DEFAULT_HEADER_TIMEOUT`]).
    pub header_timeout: Duration,
    /// Longest a write to the peer (a response, a TLS record) may wait without the peer
    /// taking a byte of it, past which the connection is closed (default
    /// [`DEFAULT_SEND_TIMEOUT`]). It runs only while a write waits, and starts again at
    /// every byte taken: a slow client that keeps reading is never cut.
    pub send_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            send_timeout: DEFAULT_SEND_TIMEOUT,
        }
    }
}

impl ConnectionLimits {
    /// With at most `max_connections` open at once (at least one).
    pub fn with_max_connections(self, max_connections: usize) -> Self {
        ConnectionLimits {
            max_connections: max_connections.max(1),
            ..self
        }
    }

    /// With `header_timeout` for a request's headers and between requests, held to
    /// [`TIMEOUT_BOUNDS`] (zero would close every connection before its first request).
    pub fn with_header_timeout(self, header_timeout: Duration) -> Self {
        ConnectionLimits {
            header_timeout: header_timeout.clamp(*TIMEOUT_BOUNDS.start(), *TIMEOUT_BOUNDS.end()),
            ..self
        }
    }

    /// With `send_timeout` for a write to the peer to make progress, held to
    /// [`TIMEOUT_BOUNDS`] (zero would close a connection at its first full buffer).
    pub fn with_send_timeout(self, send_timeout: Duration) -> Self {
        ConnectionLimits {
            send_timeout: send_timeout.clamp(*TIMEOUT_BOUNDS.start(), *TIMEOUT_BOUNDS.end()),
            ..self
        }
    }
}

/// Serves `router` on the connections of `listener` within `limits`, over HTTPS with
/// `tls` (its handshake also bounded by [`ConnectionLimits::header_timeout`]) or plain HTTP
/// without, until `shutdown` completes; then stops accepting, lets the requests in flight
/// finish (at most 30 s) and returns. An accept error is logged (throttled) and the loop
/// goes on; a peer's failed handshake ends its connection only.
pub async fn serve_connections(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    tls: Option<Tls>,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let open = Arc::new(Semaphore::new(
        limits.max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = accept(&listener, &open) => accepted,
        };
        let Some((stream, permit)) = accepted else {
            continue;
        };
        let service = TowerToHyperService::new(router.clone());
        let (builder, watcher, tls) = (builder.clone(), graceful.watcher(), tls.clone());
        tokio::spawn(async move {
            // The connection's place, given back when the task ends, however it ends.
            let _open = Open::new(permit);
            // A peer's own failure (reset, timeout, bad request) ends its connection only.
            let stream = SendTimeout::new(stream, limits.send_timeout);
            let served = match tls {
                None => {
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(connection).await
                }
                Some(tls) => {
                    let handshake = tls.acceptor().accept(stream);
                    let stream = match tokio::time::timeout(limits.header_timeout, handshake).await
                    {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, "a TLS handshake failed");
                            return closed("tls_handshake");
                        }
                        Err(_) => {
                            tracing::debug!("a TLS handshake took too long");
                            return closed("tls_handshake");
                        }
                    };
                    let connection = builder.serve_connection(TokioIo::new(stream), service);
                    watcher.watch(connection).await
                }
            };
            match served {
                Ok(()) => closed("done"),
                Err(e) if e.is_timeout() => closed("header_timeout"),
                Err(e) if is_stalled(&e) => closed("send_timeout"),
                Err(e) => {
                    tracing::debug!(error = %e, "an HTTP connection ended");
                    closed("error");
                }
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(DRAIN_LIMIT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("HTTP requests still in flight after {DRAIN_LIMIT:?}; closing them");
    }
    Ok(())
}

/// One open connection: its place under the limit and its count in
/// [`HTTP_CONNECTIONS`], both given back on drop.
struct Open {
    _permit: OwnedSemaphorePermit,
}

impl Open {
    fn new(permit: OwnedSemaphorePermit) -> Self {
        metrics::gauge!(HTTP_CONNECTIONS).increment(1.0);
        Open { _permit: permit }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        metrics::gauge!(HTTP_CONNECTIONS).decrement(1.0);
    }
}

/// Counts a connection ended for `reason` ([`HTTP_CONNECTIONS_CLOSED_TOTAL`]).
fn closed(reason: &'static str) {
    metrics::counter!(HTTP_CONNECTIONS_CLOSED_TOTAL, "reason" => reason).increment(1);
}

/// The next connection, once one may be opened; `None` after an accept error (logged).
async fn accept(
    listener: &TcpListener,
    open: &Arc<Semaphore>,
) -> Option<(tokio::net::TcpStream, OwnedSemaphorePermit)> {
    // The semaphore is never closed.
    let permit = Arc::clone(open).acquire_owned().await.ok()?;
    match listener.accept().await {
        Ok((stream, _)) => Some((stream, permit)),
        Err(e) => {
            // A connection reset before it was accepted is the peer's; anything else
            // (descriptors or memory used up) waits a moment for some to be freed.
            if !matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset
            ) {
                if let Some(suppressed) = ACCEPT_ERRORS.check() {
                    tracing::warn!(error = %e, suppressed, "accepting an HTTP connection failed");
                }
                tokio::time::sleep(ACCEPT_PAUSE).await;
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_held_to_their_bounds() {
        let limits = ConnectionLimits::default()
            .with_header_timeout(Duration::ZERO)
            .with_send_timeout(Duration::MAX);
        assert_eq!(limits.header_timeout, Duration::from_millis(1));
        assert_eq!(limits.send_timeout, hopper::core::limits::MAX_DURATION);
        let limits = limits.with_send_timeout(Duration::from_secs(3));
        assert_eq!(limits.send_timeout, Duration::from_secs(3));
    }
}
