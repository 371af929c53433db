//! Workers whose own answers are absurd: a timeout past any instant, a backoff past the
//! bound of every delay, a backoff that panics. Each job still ends an attempt with a
//! recorded outcome; none panics the runtime or leaves its job running for ever.

use std::time::Duration;

use crate::support::{FnWorker, config, wait_for};
use hopper::backend::JobGetParams;
use hopper::testing::TestDatabase;
use hopper::{
    Client, JobContext, JobError, JobId, JobRecord, JobState, NewJob, Runtime, Worker, Workers,
    limits,
};

job_kind!(Absurd, "absurd");

const QUEUE: &str = "absurd";

/// How long a test waits for an outcome: far below the 30 s lease a refused or lost
/// outcome would wait for.
const WAIT: Duration = Duration::from_secs(10);

async fn run_one(workers: Workers) -> anyhow::Result<(TestDatabase, JobRecord)> {
    let db = TestDatabase::new().await?;
    let job = NewJob::of(&Absurd { n: 0 })?.with_queue(QUEUE);
    let id: JobId = Client::new(db.backend()).insert(job).await?;
    let handle = Runtime::new(db.backend(), workers, config(QUEUE, 1))
        .start()
        .await?;
    let waited = wait_for(&db, QUEUE, WAIT, |s| s.running == 0 && s.available == 0).await;
    handle.shutdown().await;
    waited?;
    let record = db
        .backend()
        .job_get(&JobGetParams { id })
        .await?
        .ok_or_else(|| anyhow::anyhow!("job {id} is gone"))?;
    Ok((db, record))
}

/// `Worker::timeout` of `Duration::MAX` ("never time out"): the deadline is held to the
/// bound of every duration instead of overflowing the clock (a panic that lost the
/// attempt), and the job completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_timeout_past_any_instant_runs_the_job() -> anyhow::Result<()> {
    let mut workers = Workers::new();
    workers.register(FnWorker::new(|_, _: Absurd| async { Ok(()) }).with_timeout(Duration::MAX));
    let (_db, job) = run_one(workers).await?;
    assert_eq!(job.state, JobState::Completed, "{job:?}");
    Ok(())
}

/// A backoff past ten years (one that grows without bound): the retry is recorded, held
/// to ten years, rather than refused and left to the lease's expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backoff_past_the_bound_is_held_to_it() -> anyhow::Result<()> {
    let mut workers = Workers::new();
    workers.register(
        FnWorker::new(|_, _: Absurd| async { Err(JobError::retry("not yet")) })
            .with_backoff(Duration::MAX),
    );
    let (_db, job) = run_one(workers).await?;
    assert_eq!(job.state, JobState::Scheduled, "{job:?}");
    assert_eq!(job.errors.len(), 1, "{job:?}");
    assert_eq!(job.errors[0].error, "not yet");
    let delay = (job.run_at - job.errors[0].at).to_std()?;
    let bound = limits::MAX_DURATION;
    assert!(
        delay <= bound && delay > bound - Duration::from_secs(60),
        "{delay:?}"
    );
    Ok(())
}

/// A worker whose backoff panics.
struct PanickingBackoff;

#[async_trait::async_trait]
impl Worker for PanickingBackoff {
    type Args = Absurd;

    async fn process(&self, _: &JobContext, _: Absurd) -> Result<(), JobError> {
        Err(JobError::retry("not yet"))
    }

    fn backoff(&self, attempt: i32) -> Duration {
        panic!("no backoff for attempt {attempt}")
    }
}

/// A backoff that panics: the failure is recorded with the default backoff and the panic
/// named, instead of a panic in the runtime that left the job running, its lease renewed
/// by the node's heartbeat for as long as the node lived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_backoff_is_a_recorded_failure() -> anyhow::Result<()> {
    let mut workers = Workers::new();
    workers.register(PanickingBackoff);
    let (_db, job) = run_one(workers).await?;
    assert_eq!(job.state, JobState::Scheduled, "{job:?}");
    let error = &job
        .errors
        .first()
        .map(|e| e.error.clone())
        .unwrap_or_default();
    assert!(error.starts_with("not yet"), "{error}");
    assert!(error.contains("no backoff for attempt 1"), "{error}");
    Ok(())
}
