//! Inline mode: [`InlineClient`] runs every job it enqueues at once, in the enqueueing
//! task, through the registered workers (as Oban's `testing: :inline`).

use std::sync::{Arc, Mutex, PoisonError};

use hopper_core::{Backend, Error, JobArgs, NewJob, Result};

use super::run::{JobOutcome, JobRun, claim, run_claimed};
use crate::{Client, Workers};

/// A client whose enqueued jobs run at once, before `enqueue` returns, through `workers`;
/// on any backend (a [`super::TestDatabase`], a SQLite file or `sqlite::memory:`).
///
/// Each job is inserted, claimed and run as the runtime would run it, and its outcome is
/// recorded in the database (so the `require_*` assertions and `hopper jobs` see it),
/// returned, and kept in [`InlineClient::runs`]. A job scheduled for later, or whose unique
/// key is held, is inserted but not run ([`JobOutcome::NotRun`]); a retried job is not run
/// again. A job runs only if it is the one ready job of its queue, so do not share a queue
/// with a runtime or a plain client in the same test.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> hopper::Result<()> {
/// use std::sync::Arc;
/// use hopper::testing::{InlineClient, JobOutcome};
/// use hopper::{JobArgs, JobContext, JobError, SqliteBackend, SqliteOptions, Worker, Workers};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct Charge { cents: u64 }
///
/// impl JobArgs for Charge {
///     const KIND: &'static str = "charge";
/// }
///
/// struct Biller;
///
/// #[async_trait::async_trait]
/// impl Worker for Biller {
///     type Args = Charge;
///     async fn process(&self, _ctx: &JobContext, args: Charge) -> Result<(), JobError> {
///         if args.cents > 100_000 {
///             return Err(JobError::retry("over the card's limit"));
///         }
///         Ok(())
///     }
/// }
///
/// let backend = SqliteBackend::open_in_memory(SqliteOptions::default()).await?;
/// let mut workers = Workers::new();
/// workers.register(Biller);
/// let inline = InlineClient::new(Arc::new(backend), workers);
/// inline.client().migrate().await?;
///
/// assert_eq!(inline.enqueue(&Charge { cents: 500 }).await?.outcome, JobOutcome::Completed);
/// let run = inline.enqueue(&Charge { cents: 500_000 }).await?;
/// assert!(matches!(run.outcome, JobOutcome::Retry { .. }));
/// assert_eq!(inline.runs().len(), 2);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct InlineClient {
    client: Client,
    workers: Workers,
    runs: Arc<Mutex<Vec<JobRun>>>,
}

impl InlineClient {
    /// An inline client over `backend`, running jobs with `workers`.
    pub fn new(backend: Arc<dyn Backend>, workers: Workers) -> Self {
        InlineClient {
            client: Client::new(backend),
            workers,
            runs: Arc::default(),
        }
    }

    /// The plain client underneath (reads, admin, and inserts that do not run).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Enqueues typed `args` with default options and runs the job at once.
    pub async fn enqueue<A: JobArgs>(&self, args: &A) -> Result<JobRun> {
        self.insert(NewJob::of(args)?).await
    }

    /// Inserts a job built with [`NewJob`] and runs it at once. Fails, writing nothing,
    /// when no worker is registered for its kind.
    pub async fn insert(&self, job: NewJob) -> Result<JobRun> {
        let worker = self.workers.get(&job.kind).ok_or_else(|| {
            Error::InvalidInput(format!(
                "inline mode: no worker is registered for kind {:?}; registered: {:?}",
                job.kind,
                self.workers.kinds().collect::<Vec<_>>()
            ))
        })?;
        let queue = job.queue.clone();
        let id = self.client.insert(job).await?;
        let backend = self.client.backend();
        let run = match claim(backend, &queue, id).await? {
            Some(claimed) => {
                run_claimed(backend, worker.as_ref(), self.workers.chain(), claimed).await?
            }
            None => JobRun {
                outcome: JobOutcome::NotRun,
                job: self
                    .client
                    .job(id)
                    .await?
                    .ok_or_else(|| Error::NotFound(format!("job {id} after its insert")))?,
            },
        };
        self.runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(run.clone());
        Ok(run)
    }

    /// Every job this client (and its clones) enqueued so far, with its outcome, in order.
    pub fn runs(&self) -> Vec<JobRun> {
        self.runs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
