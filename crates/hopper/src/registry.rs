//! The registry: which worker runs which kind of job, with the arguments' types erased.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use hopper_core::JobArgs;

use crate::context::JobContext;
use crate::middleware::{Chain, Middleware};
use crate::worker::{JobError, Worker};

/// A worker with its argument type erased, so workers of many kinds share one map.
#[async_trait]
pub(crate) trait ErasedWorker: Send + Sync {
    /// Decodes `args` (read in place, not copied) and runs the job.
    async fn process(&self, ctx: &JobContext, args: &serde_json::Value) -> Result<(), JobError>;
    fn timeout(&self) -> Option<Duration>;
    fn backoff(&self, attempt: i32) -> Duration;
}

struct Typed<W>(W);

#[async_trait]
impl<W: Worker> ErasedWorker for Typed<W> {
    async fn process(&self, ctx: &JobContext, args: &serde_json::Value) -> Result<(), JobError> {
        let args = <W::Args as serde::Deserialize>::deserialize(args).map_err(|e| {
            JobError::permanent(format!(
                "args do not decode as the arguments of kind {:?}: {e}",
                W::Args::KIND
            ))
        })?;
        self.0.process(ctx, args).await
    }

    /// The worker's own timeout, held to the bound of every duration (`Duration::MAX` for
    /// "never" is fine), which the clock and the lease can then add.
    fn timeout(&self) -> Option<Duration> {
        self.0
            .timeout()
            .map(|t| t.min(hopper_core::limits::MAX_DURATION))
    }

    fn backoff(&self, attempt: i32) -> Duration {
        self.0.backoff(attempt)
    }
}

/// The workers a runtime runs, by kind.
#[derive(Clone, Default)]
pub struct Workers {
    by_kind: HashMap<&'static str, Arc<dyn ErasedWorker>>,
    middleware: Chain,
}

impl Workers {
    /// An empty registry.
    pub fn new() -> Self {
        Workers::default()
    }

    /// Registers `worker` for `W::Args::KIND`, replacing any earlier one.
    pub fn register<W: Worker>(&mut self, worker: W) -> &mut Self {
        self.by_kind.insert(W::Args::KIND, Arc::new(Typed(worker)));
        self
    }

    /// Adds `middleware` around every attempt of every kind, inside those added before it
    /// (the first added runs outermost; see [`crate::middleware`]).
    pub fn middleware(&mut self, middleware: impl Middleware) -> &mut Self {
        self.middleware = self.middleware.with(Arc::new(middleware));
        self
    }

    /// The kinds registered.
    pub fn kinds(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.by_kind.keys().copied()
    }

    pub(crate) fn get(&self, kind: &str) -> Option<Arc<dyn ErasedWorker>> {
        self.by_kind.get(kind).cloned()
    }

    /// The middleware around every attempt.
    pub(crate) fn chain(&self) -> &Chain {
        &self.middleware
    }
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("kinds", &self.by_kind.keys().collect::<Vec<_>>())
            .field("middleware", &self.middleware)
            .finish()
    }
}
