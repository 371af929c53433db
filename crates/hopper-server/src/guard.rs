//! A guard in front of the ZeroMQ socket that bounds every frame before zeromq reads it.
//!
//! The zeromq crate (0.7) allocates the length a frame announces before any byte of it
//! arrives, and before the handshake: a 73-byte message announcing 2^62 bytes aborted the
//! whole server ("memory allocation failed"), whatever the authentication. It offers no
//! setting for a maximum. So `hopper serve` listens with this guard: every TCP connection is
//! relayed to the ZeroMQ socket, bound on a loopback port of its own, and the guard reads the
//! ZMTP 3 framing of what the peer sends (a 64-byte greeting, then frames: a flags byte, a
//! one-byte length or, with the LONG flag, an eight-byte one). A frame announcing more than
//! the limit closes that connection, logged, before anything is allocated for it; other
//! peers are not touched. What the server sends back is relayed untouched.

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// The ZMTP greeting's length (signature, version, mechanism, as-server, filler).
const GREETING: usize = 64;
/// The flag of a frame whose length takes eight bytes.
const LONG: u8 = 0x02;

/// The public TCP address of a `tcp://host:port` endpoint, if it is one.
pub(crate) fn tcp_address(endpoint: &str) -> Option<&str> {
    endpoint.strip_prefix("tcp://")
}

/// Listens on `public` and relays every connection to `inner` through the frame check,
/// until `stop`. Returns the address actually bound (port 0 picks one).
pub(crate) async fn start(
    public: &str,
    inner: SocketAddr,
    limit: u64,
    stop: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(public).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = stop.cancelled() => return,
            };
            match accepted {
                Ok((peer, from)) => {
                    tokio::spawn(relay(peer, from, inner, limit));
                }
                Err(e) => tracing::warn!(error = %e, "accepting a connection failed"),
            }
        }
    });
    Ok((bound, task))
}

/// Relays one peer's connection to the ZeroMQ socket.
async fn relay(peer: TcpStream, from: SocketAddr, inner: SocketAddr, limit: u64) {
    let server = match TcpStream::connect(inner).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, %from, "the guard cannot reach the ZeroMQ socket");
            return;
        }
    };
    let _ = peer.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (peer_read, mut peer_write) = peer.into_split();
    let (mut server_read, server_write) = server.into_split();
    let inbound = check_frames(BufReader::new(peer_read), server_write, limit, from);
    let outbound = tokio::io::copy(&mut server_read, &mut peer_write);
    // Either side ending ends the relay: both sockets close when dropped.
    tokio::select! {
        _ = inbound => {}
        _ = outbound => {}
    }
}

/// Copies the peer's greeting and frames to `out`, stopping at a frame over `limit`.
async fn check_frames<R, W>(mut input: R, mut out: W, limit: u64, from: SocketAddr)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut greeting = [0u8; GREETING];
    if input.read_exact(&mut greeting).await.is_err() || out.write_all(&greeting).await.is_err() {
        return;
    }
    let mut frame = Vec::new();
    loop {
        let Ok(flags) = input.read_u8().await else {
            return;
        };
        frame.clear();
        frame.push(flags);
        let size = if flags & LONG != 0 {
            let Ok(n) = input.read_u64().await else {
                return;
            };
            frame.extend_from_slice(&n.to_be_bytes());
            n
        } else {
            let Ok(n) = input.read_u8().await else {
                return;
            };
            frame.push(n);
            u64::from(n)
        };
        if size > limit {
            tracing::warn!(%from, bytes = size, limit, "frame over the size limit: connection closed");
            return;
        }
        let Ok(len) = usize::try_from(size) else {
            return;
        };
        let start = frame.len();
        frame.resize(start + len, 0);
        if input.read_exact(&mut frame[start..]).await.is_err()
            || out.write_all(&frame).await.is_err()
        {
            return;
        }
    }
}
