//! A faulty TCP proxy between remote workers and `hopper serve`: it forwards bytes both
//! ways and, on each connection, every few seconds either drops the connection (both
//! sides closed at once) or stalls it (nothing forwarded either way for a while).

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// How the proxy misbehaves.
#[derive(Debug, Clone)]
pub struct Faults {
    /// Time between two faults on one connection (ms).
    pub every_ms: RangeInclusive<u64>,
    /// Chance that a fault is a drop rather than a stall.
    pub drop_chance: f64,
    /// How long a stall lasts (ms).
    pub stall_ms: RangeInclusive<u64>,
}

/// What the proxy did.
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Connections dropped on purpose.
    pub drops: AtomicU64,
    /// Stalls.
    pub stalls: AtomicU64,
}

/// Accepts on `listener` and forwards to `upstream` until the task is aborted.
pub async fn run(
    listener: TcpListener,
    upstream: SocketAddr,
    faults: Faults,
    stats: Arc<ProxyStats>,
) {
    loop {
        let (client, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("proxy accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        stats.connections.fetch_add(1, Ordering::Relaxed);
        let faults = faults.clone();
        let stats = stats.clone();
        tokio::spawn(async move {
            // The server may be down (killed): the peer sees its connection closed and
            // reconnects, as it would without the proxy.
            let Ok(server) = TcpStream::connect(upstream).await else {
                return;
            };
            if let Err(e) = forward(client, server, &faults, &stats).await {
                tracing::debug!("proxy connection ended: {e}");
            }
        });
    }
}

fn pick(range: &RangeInclusive<u64>) -> Duration {
    Duration::from_millis(rand::random_range(range.clone()))
}

/// Forwards until either side closes or a drop is due.
async fn forward(
    client: TcpStream,
    server: TcpStream,
    faults: &Faults,
    stats: &ProxyStats,
) -> std::io::Result<()> {
    let (mut client_in, mut client_out) = client.into_split();
    let (mut server_in, mut server_out) = server.into_split();
    let mut up = vec![0u8; 64 * 1024];
    let mut down = vec![0u8; 64 * 1024];
    let mut next_fault = Instant::now() + pick(&faults.every_ms);
    loop {
        // Reads are cancel-safe: a branch that loses the race has consumed nothing.
        tokio::select! {
            n = client_in.read(&mut up) => {
                let n = n?;
                if n == 0 {
                    return Ok(());
                }
                server_out.write_all(&up[..n]).await?;
            }
            n = server_in.read(&mut down) => {
                let n = n?;
                if n == 0 {
                    return Ok(());
                }
                client_out.write_all(&down[..n]).await?;
            }
            () = tokio::time::sleep_until(next_fault) => {
                if rand::random_bool(faults.drop_chance) {
                    stats.drops.fetch_add(1, Ordering::Relaxed);
                    return Ok(()); // both halves dropped: both peers see the close
                }
                stats.stalls.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(pick(&faults.stall_ms)).await;
                next_fault = Instant::now() + pick(&faults.every_ms);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes go through both ways; a connection is dropped when its fault is due.
    #[tokio::test]
    async fn forwards_then_drops() -> std::io::Result<()> {
        let echo = TcpListener::bind("127.0.0.1:0").await?;
        let echo_addr = echo.local_addr()?;
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let proxy_addr = listener.local_addr()?;
        let stats = Arc::new(ProxyStats::default());
        let faults = Faults {
            every_ms: 300..=300,
            drop_chance: 1.0,
            stall_ms: 0..=0,
        };
        let task = tokio::spawn(run(listener, echo_addr, faults, stats.clone()));
        let mut conn = TcpStream::connect(proxy_addr).await?;
        conn.write_all(b"hello").await?;
        let mut got = [0u8; 5];
        conn.read_exact(&mut got).await?;
        assert_eq!(&got, b"hello");
        // The drop closes the connection: the read ends (0 bytes or a reset).
        let mut rest = [0u8; 1];
        let ended = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut rest)).await;
        assert!(matches!(ended, Ok(Ok(0)) | Ok(Err(_))), "{ended:?}");
        assert_eq!(stats.drops.load(Ordering::Relaxed), 1);
        task.abort();
        Ok(())
    }
}
