//! The listener: the backend's wake-ups (LISTEN/NOTIFY on PostgreSQL) handed to the node,
//! subscribing again with backoff whenever the stream ends or cannot be had.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use hopper_core::{Backend, Error, Wakeup};
use tokio_util::sync::CancellationToken;

use super::{Service, tick};

/// What a node does with its wake-ups: a runtime wakes its producer or stops a cancelled
/// handler; `hopper serve` hands them to its loop.
#[async_trait::async_trait]
pub trait OnWakeup: Send + Sync + 'static {
    /// One wake-up. False ends the listener: nobody wants them any more.
    async fn wakeup(&self, wakeup: Wakeup) -> bool;

    /// Subscribing failed with `error`: wake-ups are missed until it succeeds again (the
    /// node polls meanwhile). The listener tries again after a backoff (100 ms, doubling
    /// up to 5 s).
    async fn unsubscribed(&self, error: &Error);
}

/// Subscribes to `backend`'s wake-ups and hands each to its [`OnWakeup`].
pub struct Listener {
    backend: Arc<dyn Backend>,
    on: Arc<dyn OnWakeup>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").finish_non_exhaustive()
    }
}

impl Listener {
    /// A listener to `backend`'s wake-ups.
    pub fn new(backend: Arc<dyn Backend>, on: Arc<dyn OnWakeup>) -> Self {
        Listener { backend, on }
    }

    async fn run_until(&self, stop: CancellationToken) -> crate::Result<()> {
        let mut backoff = Duration::from_millis(100);
        loop {
            let subscribed = tokio::select! {
                s = self.backend.subscribe() => s,
                _ = stop.cancelled() => return Ok(()),
            };
            let mut stream = match subscribed {
                Ok(s) => s,
                Err(e) => {
                    self.on.unsubscribed(&e).await;
                    if !tick(&stop, backoff).await {
                        return Ok(());
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            };
            backoff = Duration::from_millis(100);
            loop {
                let wakeup = tokio::select! {
                    w = stream.next() => w,
                    _ = stop.cancelled() => return Ok(()),
                };
                match wakeup {
                    Some(w) => {
                        if !self.on.wakeup(w).await {
                            return Ok(());
                        }
                    }
                    None => break,
                }
            }
        }
    }
}

impl Service for Listener {
    fn name(&self) -> &'static str {
        "listener"
    }

    fn run(self: Arc<Self>, stop: CancellationToken) -> BoxFuture<'static, crate::Result<()>> {
        Box::pin(async move { self.run_until(stop).await })
    }
}
