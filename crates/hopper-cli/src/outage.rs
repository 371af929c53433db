//! Riding through database outages: the long-running commands (`bench`, `stats --watch`)
//! retry what they read themselves while the database restarts or fails over, as the
//! runtime does for its own work, instead of exiting on the first refused connection.

use std::future::Future;
use std::time::Duration;

/// How long a command keeps retrying one read before it gives up with the last error: a
/// restart takes seconds, a failover under a minute.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// Runs `read` until it succeeds, retrying failures with backoff (100 ms doubling to 2 s)
/// for at most [`PATIENCE`]. The first failure of a streak is reported on stderr, once.
pub async fn retry<T, F, Fut>(what: &str, mut read: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let started = tokio::time::Instant::now();
    let mut backoff = Duration::from_millis(100);
    let mut reported = false;
    loop {
        match read().await {
            Ok(value) => {
                if reported {
                    eprintln!("hopper: {what}: the database answers again");
                }
                return Ok(value);
            }
            Err(e) if started.elapsed() < PATIENCE => {
                if !reported {
                    eprintln!("hopper: {what} failed: {e:#}; retrying");
                    reported = true;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
            Err(e) => return Err(e.context(format!("{what}: gave up after {PATIENCE:?}"))),
        }
    }
}
