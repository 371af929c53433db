//! What a handler gets besides its arguments: the job's identity and lease, cancellation,
//! lease extension, the blocking pool (completion inside the handler's own transaction is
//! in `postgres.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use hopper_core::backend::JobExtendManyParams;
use hopper_core::job_log::LogLevel;

use crate::log_sink::LogSink;
use hopper_core::{Backend, ClaimedJob, Error, JobId, Lease, Priority, Result};
use tokio::sync::{Mutex, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Why a running job's token was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum StopReason {
    None = 0,
    /// Cancelled by a user: the lease is already revoked.
    Cancelled = 1,
    /// The lease was lost (expired and re-claimed): someone else owns the job.
    LeaseLost = 2,
    /// The shutdown deadline passed: hand the job back.
    Shutdown = 3,
}

/// Shared between a running job's context and the runtime.
#[derive(Debug)]
pub(crate) struct RunState {
    pub token: CancellationToken,
    reason: AtomicU8,
    pub deadline: Mutex<Instant>,
    pub completed_in_tx: AtomicBool,
}

impl RunState {
    pub fn new(deadline: Instant) -> Self {
        RunState {
            token: CancellationToken::new(),
            reason: AtomicU8::new(StopReason::None as u8),
            deadline: Mutex::new(deadline),
            completed_in_tx: AtomicBool::new(false),
        }
    }

    /// Cancels the handler, remembering the first reason given.
    pub fn stop(&self, reason: StopReason) {
        let _ = self.reason.compare_exchange(
            StopReason::None as u8,
            reason as u8,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
        self.token.cancel();
    }

    pub fn reason(&self) -> StopReason {
        match self.reason.load(Ordering::SeqCst) {
            1 => StopReason::Cancelled,
            2 => StopReason::LeaseLost,
            3 => StopReason::Shutdown,
            _ => StopReason::None,
        }
    }
}

/// The context of one attempt of one job, passed to [`crate::Worker::process`].
#[derive(Debug, Clone)]
pub struct JobContext {
    job: Arc<ClaimedJob>,
    run: Arc<RunState>,
    backend: Arc<dyn Backend>,
    blocking: Arc<Semaphore>,
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    started: Instant,
    logs: Arc<LogSink>,
}

impl JobContext {
    pub(crate) fn new(
        job: Arc<ClaimedJob>,
        run: Arc<RunState>,
        backend: Arc<dyn Backend>,
        blocking: Arc<Semaphore>,
    ) -> Self {
        JobContext {
            job,
            run,
            backend,
            blocking,
            started: Instant::now(),
            logs: Arc::default(),
        }
    }

    /// The job's id.
    pub fn id(&self) -> JobId {
        self.job.lease.job_id
    }

    /// The lease this attempt holds.
    pub fn lease(&self) -> Lease {
        self.job.lease
    }

    /// Which counted attempt this is (1 for the first).
    pub fn attempt(&self) -> i32 {
        self.job.counted_attempt
    }

    /// Attempts before the job is dead-lettered.
    pub fn max_attempts(&self) -> i32 {
        self.job.max_attempts
    }

    /// The job's queue.
    pub fn queue(&self) -> &str {
        &self.job.queue
    }

    /// The job's kind.
    pub fn kind(&self) -> &str {
        &self.job.kind
    }

    /// The job's priority.
    pub fn priority(&self) -> Priority {
        self.job.priority
    }

    /// The job's metadata (a JSON object, `{}` when it has none): the W3C trace context
    /// of the span that enqueued it is its `traceparent`.
    pub fn meta(&self) -> &serde_json::Value {
        &self.job.meta
    }

    /// Writes a line to this attempt's log, kept with the job (`hopper jobs show`, the
    /// HTTP API, the dashboard). Never fails and never blocks on the database: lines are
    /// held in memory and stored while the attempt runs, a second after the first of them
    /// was written or once 16 KiB of them wait
    /// ([`hopper_core::job_log::LOG_FLUSH_INTERVAL`], [`hopper_core::job_log::LOG_FLUSH_BYTES`]),
    /// and the rest when the handler returns, before its outcome. An attempt keeps at most
    /// [`hopper_core::job_log::MAX_ATTEMPT_LOG_BYTES`] of lines; past that they are
    /// counted and dropped, and the log says how many.
    ///
    /// ```no_run
    /// # fn f(ctx: &hopper::JobContext) {
    /// use hopper::LogLevel;
    /// let mut fields = serde_json::Map::new();
    /// fields.insert("rows".into(), 42.into());
    /// ctx.log(LogLevel::Info, "imported", fields);
    /// # }
    /// ```
    pub fn log(
        &self,
        level: LogLevel,
        message: impl Into<String>,
        fields: serde_json::Map<String, serde_json::Value>,
    ) {
        self.logs.push(level, message.into(), fields);
    }

    /// Stores this attempt's lines as they become due until [`JobContext::close_logs`],
    /// then the rest (see [`JobContext::log`]). Run beside the handler.
    pub(crate) async fn write_logs(&self) {
        self.logs.run(self.backend.logs(), self.job.lease).await;
    }

    /// The handler returned: [`JobContext::write_logs`] stores the rest and returns.
    pub(crate) fn close_logs(&self) {
        self.logs.close();
    }

    /// The claimed job as the backend returned it.
    pub fn job(&self) -> &ClaimedJob {
        &self.job
    }

    /// A token cancelled when the handler should stop: the job was cancelled, its lease
    /// was lost, or shutdown's deadline passed. A handler that does not watch it is
    /// dropped at its next `.await` anyway.
    pub fn cancellation(&self) -> &CancellationToken {
        &self.run.token
    }

    /// True once the handler should stop.
    pub fn is_cancelled(&self) -> bool {
        self.run.token.is_cancelled()
    }

    /// Extends this attempt: its timeout moves to `by` from now, and so does its lease
    /// unless it already ends later (a lease never moves earlier).
    /// Fails with [`Error::LeaseLost`] if the job is no longer this worker's, and with
    /// [`Error::InvalidInput`] (changing nothing) for `by` past
    /// [`crate::limits::MAX_DURATION`].
    pub async fn extend(&self, by: Duration) -> Result<()> {
        let by = hopper_core::limits::check_duration("a lease extension", by)?;
        let params = JobExtendManyParams {
            leases: vec![self.job.lease],
            by,
        };
        let lost = crate::spans::extend_leases(&*self.backend, &params).await?;
        if !lost.is_empty() {
            self.run.stop(StopReason::LeaseLost);
            return Err(Error::LeaseLost(self.job.lease));
        }
        *self.run.deadline.lock().await = Instant::now() + by;
        Ok(())
    }

    /// Runs blocking or CPU-heavy `work` on the blocking pool, never on the
    /// async threads. The pool's size is the runtime's `blocking_threads`.
    pub async fn blocking<T, F>(&self, work: F) -> Result<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let _permit = self.blocking.acquire().await.map_err(|_| Error::Shutdown)?;
        tokio::task::spawn_blocking(work)
            .await
            .map_err(Error::database)
    }

    #[cfg(feature = "postgres")]
    /// The backend the job runs on.
    pub(crate) fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    #[cfg(feature = "postgres")]
    /// How long this attempt has run, in milliseconds.
    pub(crate) fn elapsed_ms(&self) -> i64 {
        i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    #[cfg(feature = "postgres")]
    /// Tells the runtime the handler completed the job in its own transaction, so it
    /// reports no outcome of its own.
    pub(crate) fn mark_completed_in_tx(&self) {
        self.run.completed_in_tx.store(true, Ordering::SeqCst);
    }
}
