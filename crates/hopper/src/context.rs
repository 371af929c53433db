//! What a handler gets besides its arguments: the job's identity and lease, cancellation,
//! lease extension, the blocking pool (completion inside the handler's own transaction is
//! in `postgres.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

use hopper_core::backend::JobExtendManyParams;
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

    /// Extends this attempt: its timeout moves to `by` from now, and so does its lease.
    /// Fails with [`Error::LeaseLost`] if the job is no longer this worker's.
    pub async fn extend(&self, by: Duration) -> Result<()> {
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
