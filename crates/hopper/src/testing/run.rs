//! Running one job of a worker in a test, without a runtime: the engine that
//! `run_job`, `run_new_job` (`run_one.rs`) and [`super::InlineClient`] share.
//!
//! A run is real: the job is inserted, claimed (a lease), run with a [`JobContext`] like
//! the runtime's (timeout, panics caught, cancellation, `extend`), and its outcome recorded
//! by the backend, whose answer becomes the [`JobOutcome`].

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use hopper_core::backend::JobGetParams;
use hopper_core::{
    Backend, ClaimParams, ClaimedJob, Error, Finish, FinishResult, JobListParams, JobRecord,
    JobState, NodeInfo, Outcome, Result, Wakeup,
};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::context::{JobContext, RunState, StopReason};
use crate::middleware::Chain;
use crate::registry::ErasedWorker;
use crate::runtime::handler;

/// What became of a job run by [`run_job`], [`run_new_job`] or an
/// [`InlineClient`](super::InlineClient), as recorded by the backend.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum JobOutcome {
    /// The handler returned `Ok`: the job is `completed`.
    Completed,
    /// The attempt failed and the job will be tried again after `retry_in` (it is
    /// `scheduled`). A panic or a timeout is such a failure too.
    Retry {
        /// Why the attempt failed.
        error: String,
        /// The delay before the next attempt.
        retry_in: Duration,
    },
    /// The job is dead-lettered (`failed`): the handler failed permanently, or an attempt
    /// failed and it was the last one.
    Failed {
        /// Why the last attempt failed.
        error: String,
    },
    /// The handler snoozed: the job runs again after `retry_in`, the attempt not counted.
    Snoozed {
        /// The delay before it runs again.
        retry_in: Duration,
    },
    /// The job was cancelled while it ran (its handler was told through
    /// [`JobContext::cancellation`]).
    Cancelled,
    /// Not run (inline mode only): the job was not available when enqueued, because it is
    /// scheduled for later or its unique key is held by another unfinished job.
    NotRun,
}

/// One job run in a test: its outcome, and the job as stored afterwards.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRun {
    /// What became of it.
    pub outcome: JobOutcome,
    /// The job as stored after the run (state, attempt, errors, …).
    pub job: JobRecord,
}

/// Claims the job `id`, which must be the only available one of `queue` (anything else
/// claimed is handed back and reported). `None` when the job is not available.
pub(crate) async fn claim(
    backend: &Arc<dyn Backend>,
    queue: &str,
    id: hopper_core::JobId,
) -> Result<Option<ClaimedJob>> {
    let others = backend
        .job_list(&JobListParams {
            queue: Some(queue.to_owned()),
            state: Some(JobState::Available),
            limit: 2,
            ..JobListParams::default()
        })
        .await?;
    if let Some(other) = others.iter().find(|j| j.id != id) {
        return Err(Error::Conflict(format!(
            "queue {queue:?} holds another available job ({} of kind {:?}); a job run at once \
             must be the only one ready in its queue",
            other.id, other.kind
        )));
    }
    if others.is_empty() {
        return Ok(None);
    }
    let node = NodeInfo {
        id: uuid::Uuid::now_v7(),
        name: format!("hopper-testing-{}", std::process::id()),
        queues: vec![queue.to_owned()],
        concurrency: 1,
    };
    // Registered, so a rescuer of another node on the same database sees a live node.
    backend.node_heartbeat(&node).await?;
    let mut claimed = backend
        .job_claim(&ClaimParams {
            queue: queue.to_owned(),
            node: node.id,
            limit: 1,
            lease: Duration::from_secs(3600),
            kinds: None,
        })
        .await?;
    match claimed.pop() {
        Some(job) if job.lease.job_id == id => Ok(Some(job)),
        Some(job) => {
            let released = Finish {
                lease: job.lease,
                outcome: Outcome::Released,
            };
            backend.job_finish_many(&[released]).await?;
            Err(Error::Conflict(format!(
                "queue {queue:?} got another available job ({}) while {id} was run at once",
                job.lease.job_id
            )))
        }
        None => Ok(None),
    }
}

/// Runs a claimed job to its outcome and records it.
pub(crate) async fn run_claimed(
    backend: &Arc<dyn Backend>,
    worker: &dyn ErasedWorker,
    chain: &Chain,
    job: ClaimedJob,
) -> Result<JobRun> {
    let lease = job.lease;
    let timeout = worker.timeout().unwrap_or(job.timeout);
    if !handler::hold_for_timeout(&**backend, &job, timeout, timeout).await? {
        return Err(Error::LeaseLost(lease));
    }
    let started = Instant::now();
    let run = Arc::new(RunState::new(started + timeout));
    // A test has no runtime listening for cancellations: this watcher stops the run when
    // the job is cancelled, as the runtime's listener would.
    let mut wakeups = backend.subscribe().await?;
    let watcher = {
        let run = run.clone();
        tokio::spawn(async move {
            while let Some(wakeup) = wakeups.next().await {
                if wakeup == Wakeup::Cancelled(lease.job_id) {
                    run.stop(StopReason::Cancelled);
                    return;
                }
            }
        })
    };
    let job = Arc::new(job);
    let blocking = Arc::new(Semaphore::new(BLOCKING_THREADS));
    let ctx = JobContext::new(job.clone(), run.clone(), backend.clone(), blocking);
    let end = handler::drive(worker, chain, &ctx, &job.args, &run, started).await;
    watcher.abort();
    let settled = handler::settle(run.reason(), end);
    let duration_ms = handler::millis(started.elapsed());
    let answer = match handler::settled_outcome(settled, worker, job.counted_attempt, duration_ms) {
        None => None,
        Some(outcome) => {
            let finish = Finish { lease, outcome };
            let answers = backend
                .job_finish_many(std::slice::from_ref(&finish))
                .await?;
            Some((finish.outcome, answers.first().copied()))
        }
    };
    let record = backend
        .job_get(&JobGetParams { id: lease.job_id })
        .await?
        .ok_or_else(|| Error::NotFound(format!("job {} after its run", lease.job_id)))?;
    let outcome = match answer {
        None => JobOutcome::Cancelled,
        Some((_, Some(FinishResult::Held))) => return Err(hopper_core::job_log::held_elsewhere()),
        Some((_, Some(FinishResult::LeaseLost))) => match record.state {
            JobState::Cancelled => JobOutcome::Cancelled,
            // Completed inside the handler's own transaction (`JobContext::complete_in`).
            JobState::Completed => JobOutcome::Completed,
            _ => return Err(Error::LeaseLost(lease)),
        },
        Some((outcome, _)) => recorded(outcome, record.state),
    };
    Ok(JobRun {
        outcome,
        job: record,
    })
}

/// Blocking-pool permits of a test run's context.
const BLOCKING_THREADS: usize = 4;

/// The test's view of a recorded outcome: a retry on the last attempt is a dead letter.
fn recorded(outcome: Outcome, state: JobState) -> JobOutcome {
    match outcome {
        Outcome::Completed { .. } => JobOutcome::Completed,
        Outcome::Retry { error, .. } if state == JobState::Failed => JobOutcome::Failed { error },
        Outcome::Retry {
            error, retry_in, ..
        } => JobOutcome::Retry { error, retry_in },
        Outcome::Failed { error, .. } => JobOutcome::Failed { error },
        Outcome::Snoozed { retry_in } => JobOutcome::Snoozed { retry_in },
        Outcome::Released => JobOutcome::NotRun,
    }
}
