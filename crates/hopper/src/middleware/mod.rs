//! Middleware: code of yours around every enqueue of a [`Client`](crate::Client) and every
//! attempt a [`Runtime`](crate::Runtime) runs, for error reporters (Sentry), auditing,
//! argument encryption, your own metrics or tracing, without forking hopper. The
//! OpenTelemetry integration of the `otel` feature is one ([`crate::otel`]).
//!
//! - **Enqueue**: [`Middleware::enqueue`] sees the jobs of one client call (one job, or all
//!   of a bulk insert) before they are written, and may change them (arguments, queue,
//!   meta, anything of [`NewJob`]) or refuse the whole call with an error: then nothing is
//!   written and the caller gets that error.
//! - **Execution**: [`Middleware::execute`] wraps one attempt. It gets the job's context
//!   and arguments and a [`Next`]; `next.run(args)` runs the rest of the chain and the
//!   worker, with these arguments or others (decrypted ones, say), and answers the
//!   handler's result, which the middleware may return, change (turn an error into a
//!   snooze), or replace without calling `next` at all (the worker then does not run).
//!
//! **Order**: middleware run in the order they were added, the first added outermost: on
//! enqueue the first sees the jobs first; on execution the first starts first and sees the
//! result last, as with tower's `ServiceBuilder`.
//!
//! **Errors and ends**: a worker's panic reaches the chain as a retryable
//! [`JobError`] (`panicked: …`), like any error the handler returns, so a middleware sees
//! it. A middleware's own panic fails the attempt the same way. A run stopped from outside
//! (its timeout, a cancellation, a lost lease, a shutdown) drops the whole chain's future,
//! as tower drops a service's future: code after `next.run(..).await` does not run then,
//! so keep cleanup in `Drop` guards; how the attempt ended is recorded on its `hopper.job`
//! span ([`crate::spans`]) and told to its [`AttemptScope`]s.
//! - **Attempt scopes**: [`Middleware::attempt`] may answer an [`AttemptScope`] that runs
//!   every poll of the attempt inside itself and hears how it ended, for a tracer that
//!   makes its own span per attempt (the OpenTelemetry middleware does).
//!
//! Enqueue middleware apply to the [`Client`](crate::Client)'s `enqueue`, `insert`,
//! `insert_many`, `upsert` and `upsert_many`, and to their forms inside your own
//! PostgreSQL transaction (`Client::insert_in`, `Client::insert_in_sqlx`, ...). Periodic
//! jobs go through the enqueue side of the runtime's middleware (those of
//! [`Workers::middleware`](crate::Workers::middleware)), once per advance of an entry on
//! each node that tries it. What writes to the store without a client passes none:
//! `PgBackend::insert_in` and `PgBackend::sqlx()` (the raw writes), the SQL
//! `enqueue(...)`, and `hopper serve`'s submissions unless its `ServeConfig::client` is
//! set (their callers set the meta themselves).
//!
//! ```
//! use hopper::middleware::{Middleware, Next};
//! use hopper::{JobContext, JobError, NewJob};
//!
//! /// Counts failed attempts by kind, in the application's own metrics.
//! struct CountFailures;
//!
//! #[async_trait::async_trait]
//! impl Middleware for CountFailures {
//!     async fn execute(
//!         &self,
//!         ctx: &JobContext,
//!         args: &serde_json::Value,
//!         next: Next<'_>,
//!     ) -> Result<(), JobError> {
//!         let result = next.run(args).await;
//!         if result.is_err() {
//!             eprintln!("{} failed on attempt {}", ctx.job().kind, ctx.job().lease.attempt);
//!         }
//!         result
//!     }
//! }
//! ```

mod scope;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use async_trait::async_trait;
use futures_util::FutureExt;
use hopper_core::{NewJob, Result};

use crate::context::JobContext;
use crate::registry::ErasedWorker;
use crate::worker::JobError;

pub use self::scope::AttemptScope;
pub(crate) use self::scope::{Scopes, end as end_scopes, within};
/// What a middleware's attempt hooks see: the claimed job, and how its attempt ended.
pub use hopper_core::{ClaimedJob, Outcome};

/// Code around enqueues and job attempts; see the [module docs](self). Both methods do
/// nothing by default, so a middleware implements only the side it needs.
#[async_trait]
pub trait Middleware: Send + Sync + 'static {
    /// Called with the jobs of one enqueue before they are written. May change them; an
    /// error refuses the whole enqueue (nothing is written).
    async fn enqueue(&self, jobs: &mut [NewJob]) -> Result<()> {
        let _ = jobs;
        Ok(())
    }

    /// Called with the `hopper.enqueue` span of an enqueue (not with a periodic tick's
    /// span, whose jobs carry no trace context yet) before the span starts and before
    /// [`Middleware::enqueue`], with the jobs
    /// as the caller gave them, to give the span a parent, links or fields; the span is
    /// disabled when no subscriber wants it. The OpenTelemetry middleware makes it a child
    /// of the `traceparent` the jobs carry already (the CLI's `--traceparent`, a
    /// submission through `hopper serve`).
    fn enqueue_span(&self, jobs: &[NewJob], span: &tracing::Span) {
        let _ = (jobs, span);
    }

    /// Called with the `hopper.job` span of each attempt before the span starts (before
    /// [`Middleware::execute`]), to give it a parent, links or fields; the span is disabled
    /// when no subscriber wants it. The OpenTelemetry middleware continues here the trace
    /// that the job's enqueue stored in its meta.
    fn attempt_span(&self, job: &ClaimedJob, span: &tracing::Span) {
        let _ = (job, span);
    }

    /// Called before each attempt starts (after [`Middleware::attempt_span`]), to follow it
    /// to its end: the [`AttemptScope`] answered, if any, runs every poll of the attempt
    /// inside itself and is told how the attempt ended. The OpenTelemetry middleware starts
    /// the attempt's OpenTelemetry span here, so that its sampler decides before the span
    /// is built, and attaches the span's context while the attempt runs.
    fn attempt(&self, job: &ClaimedJob) -> Option<Box<dyn AttemptScope>> {
        let _ = job;
        None
    }

    /// Wraps one attempt of the job of `ctx`: call `next.run(args)` to run the rest of the
    /// chain and the worker, and answer its result or another.
    async fn execute(
        &self,
        ctx: &JobContext,
        args: &serde_json::Value,
        next: Next<'_>,
    ) -> std::result::Result<(), JobError> {
        let _ = ctx;
        next.run(args).await
    }
}

/// The middleware of a client or a runtime, in the order they run.
#[derive(Clone, Default)]
pub(crate) struct Chain(Arc<Vec<Arc<dyn Middleware>>>);

impl Chain {
    /// The chain with `middleware` added last (innermost).
    pub(crate) fn with(&self, middleware: Arc<dyn Middleware>) -> Chain {
        let mut all = (*self.0).clone();
        all.push(middleware);
        Chain(Arc::new(all))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Runs every middleware's [`Middleware::enqueue`] on `jobs`, stopping at the first error.
    pub(crate) async fn enqueue(&self, jobs: &mut [NewJob]) -> Result<()> {
        for middleware in self.0.iter() {
            middleware.enqueue(jobs).await?;
        }
        Ok(())
    }

    /// Hands the span of an enqueue of `jobs` to every middleware, in order.
    pub(crate) fn enqueue_span(&self, jobs: &[NewJob], span: &tracing::Span) {
        for middleware in self.0.iter() {
            middleware.enqueue_span(jobs, span);
        }
    }

    /// Hands the span of an attempt of `job` to every middleware, in order.
    pub(crate) fn attempt_span(&self, job: &ClaimedJob, span: &tracing::Span) {
        for middleware in self.0.iter() {
            middleware.attempt_span(job, span);
        }
    }

    /// The scopes of an attempt of `job`, of the middleware that want one, in order.
    pub(crate) fn attempt(&self, job: &ClaimedJob) -> Scopes {
        self.0.iter().filter_map(|m| m.attempt(job)).collect()
    }

    /// Runs one attempt of `worker` through the chain.
    pub(crate) async fn execute(
        &self,
        worker: &dyn ErasedWorker,
        ctx: &JobContext,
        args: &serde_json::Value,
    ) -> std::result::Result<(), JobError> {
        Next {
            rest: &self.0,
            worker,
            ctx,
        }
        .run(args)
        .await
    }
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} middleware", self.0.len())
    }
}

/// The rest of an attempt's chain: the middleware after the current one, then the worker.
pub struct Next<'a> {
    rest: &'a [Arc<dyn Middleware>],
    worker: &'a dyn ErasedWorker,
    ctx: &'a JobContext,
}

impl Next<'_> {
    /// Runs the rest of the chain and the worker on `args`, and answers the handler's
    /// result; a panic of the worker or of a later middleware comes back as a retryable
    /// error.
    pub async fn run(self, args: &serde_json::Value) -> std::result::Result<(), JobError> {
        let Next { rest, worker, ctx } = self;
        let step = async move {
            match rest.split_first() {
                Some((first, rest)) => first.execute(ctx, args, Next { rest, worker, ctx }).await,
                None => worker.process(ctx, args).await,
            }
        };
        AssertUnwindSafe(step)
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| {
                Err(JobError::retry(format!(
                    "panicked: {}",
                    crate::runtime::handler::panic_message(&*panic)
                )))
            })
    }
}

impl std::fmt::Debug for Next<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Next")
            .field("middleware_left", &self.rest.len())
            .finish()
    }
}
