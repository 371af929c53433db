//! The listener: the backend's wake-ups (LISTEN/NOTIFY on PostgreSQL) handed to the node,
//! subscribing again with backoff whenever the stream ends or cannot be had.

use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use hopper_core::{Backend, Error, Wakeup};
use tokio_util::sync::CancellationToken;

use super::{OUTAGE_BACKOFF_FIRST, OUTAGE_BACKOFF_MAX, Service, tick};

/// What a node does with its wake-ups: a runtime wakes its producer or stops a cancelled
/// handler; `hopper serve` hands them to its loop.
#[async_trait::async_trait]
pub trait OnWakeup: Send + Sync + 'static {
    /// One wake-up. False ends the listener: nobody wants them any more.
    async fn wakeup(&self, wakeup: Wakeup) -> bool;

    /// Subscribing failed with `error`: wake-ups are missed until it succeeds again (the
    /// node polls meanwhile). The listener tries again after a backoff (100 ms, doubling
    /// up to 5 s) when the error is transient; any other ends its run, for its supervisor
    /// (see the [module docs](super)).
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
        let mut backoff = OUTAGE_BACKOFF_FIRST;
        loop {
            let subscribed = tokio::select! {
                s = self.backend.subscribe() => s,
                _ = stop.cancelled() => return Ok(()),
            };
            let mut stream = match subscribed {
                Ok(s) => s,
                Err(e) => {
                    // Told every time (the node polls meanwhile); retried with backoff
                    // while the database is away, the run ended on anything else.
                    self.on.unsubscribed(&e).await;
                    if !e.is_transient() {
                        return Err(e);
                    }
                    if !tick(&stop, backoff).await {
                        return Ok(());
                    }
                    backoff = (backoff * 2).min(OUTAGE_BACKOFF_MAX);
                    continue;
                }
            };
            backoff = OUTAGE_BACKOFF_FIRST;
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
