//! Running one job of a worker on a private in-memory SQLite database: [`run_job`] and
//! [`run_new_job`] (the `sqlite` feature).

use std::sync::Arc;

use hopper_core::{Backend, Error, JobArgs, NewJob, Result};
use hopper_sqlite::{SqliteBackend, SqliteOptions};

use super::run::{JobRun, claim, run_claimed};
use crate::registry::Workers;
use crate::worker::Worker;

/// Runs one job of `worker` with `args`, as the runtime would run its first attempt, on a
/// private in-memory SQLite database (no server needed), and returns its outcome.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> hopper::Result<()> {
/// use hopper::testing::{JobOutcome, run_job};
/// use hopper::{JobArgs, JobContext, JobError, Worker};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Resize { width: u32 }
///
/// impl JobArgs for Resize {
///     const KIND: &'static str = "resize";
/// }
///
/// struct Resizer;
///
/// #[async_trait::async_trait]
/// impl Worker for Resizer {
///     type Args = Resize;
///     async fn process(&self, _ctx: &JobContext, args: Resize) -> Result<(), JobError> {
///         if args.width == 0 {
///             return Err(JobError::permanent("width must be positive"));
///         }
///         Ok(())
///     }
/// }
///
/// assert_eq!(run_job(Resizer, &Resize { width: 640 }).await?.outcome, JobOutcome::Completed);
/// let run = run_job(Resizer, &Resize { width: 0 }).await?;
/// assert_eq!(run.outcome, JobOutcome::Failed { error: "width must be positive".into() });
/// assert_eq!(run.job.errors.len(), 1);
/// # Ok(()) }
/// ```
pub async fn run_job<W: Worker>(worker: W, args: &W::Args) -> Result<JobRun> {
    run_new_job(worker, NewJob::of(args)?).await
}

/// Like [`run_job`], for a job built with [`NewJob`]: its queue, priority, maximum attempts
/// (1 makes this attempt the last) and timeout are honoured. It must be of the worker's
/// kind and due now.
pub async fn run_new_job<W: Worker>(worker: W, job: NewJob) -> Result<JobRun> {
    if job.kind != W::Args::KIND {
        return Err(Error::InvalidInput(format!(
            "the job is of kind {:?}, the worker runs {:?}",
            job.kind,
            W::Args::KIND
        )));
    }
    job.validate()?;
    let backend: Arc<dyn Backend> =
        Arc::new(SqliteBackend::open_in_memory(SqliteOptions::default()).await?);
    backend.migrate().await?;
    backend.job_insert(&job).await?;
    let Some(claimed) = claim(&backend, &job.queue, job.id).await? else {
        return Err(Error::InvalidInput(format!(
            "the job is not due now (run_at {:?}); run_new_job runs jobs that are",
            job.run_at
        )));
    };
    let mut workers = Workers::new();
    workers.register(worker);
    let worker = workers
        .get(W::Args::KIND)
        .ok_or_else(|| Error::NotFound(format!("a worker for kind {:?}", W::Args::KIND)))?;
    run_claimed(&backend, worker.as_ref(), workers.chain(), claimed).await
}
