//! `hopper::testing::run_job`: one job of a worker, run without a runtime, ends in the
//! outcome the runtime would record, and the job as stored says so too.

use std::time::Duration;

use hopper::testing::{JobOutcome, run_job, run_new_job};
use hopper::{Error, JobArgs, JobContext, JobError, JobState, NewJob, Worker};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// What the handler is to do.
#[derive(Debug, Serialize, Deserialize)]
enum Act {
    Succeed,
    Retry,
    RetryIn(u64),
    Fail,
    Snooze(u64),
    Panic,
    Hang,
    ExtendThenSucceed,
}

#[derive(Serialize, Deserialize)]
struct Task {
    act: Act,
}

impl JobArgs for Task {
    const KIND: &'static str = "task";
}

/// Does as told, with a 7 s backoff and, when given, its own timeout.
struct Doer {
    timeout: Option<Duration>,
}

const DOER: Doer = Doer { timeout: None };

#[async_trait::async_trait]
impl Worker for Doer {
    type Args = Task;

    async fn process(&self, ctx: &JobContext, task: Task) -> Result<(), JobError> {
        match task.act {
            Act::Succeed => Ok(()),
            Act::Retry => Err(JobError::retry(format!("attempt {} failed", ctx.attempt()))),
            Act::RetryIn(ms) => Err(JobError::retry_after("later", Duration::from_millis(ms))),
            Act::Fail => Err(JobError::permanent("never")),
            Act::Snooze(s) => Err(JobError::snooze(Duration::from_secs(s))),
            Act::Panic => panic!("boom"),
            Act::Hang => {
                ctx.cancellation().cancelled().await;
                Err(JobError::retry("stopped"))
            }
            Act::ExtendThenSucceed => {
                ctx.extend(Duration::from_secs(60)).await?;
                Ok(())
            }
        }
    }

    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    fn backoff(&self, _attempt: i32) -> Duration {
        Duration::from_secs(7)
    }
}

fn task(act: Act) -> Task {
    Task { act }
}

#[tokio::test]
async fn a_successful_run_completes_the_job() -> anyhow::Result<()> {
    let run = run_job(DOER, &task(Act::Succeed)).await?;
    assert_eq!(run.outcome, JobOutcome::Completed);
    assert_eq!(run.job.state, JobState::Completed);
    assert_eq!(run.job.attempt, 1);
    assert!(run.job.duration_ms.is_some());
    // The context's lease can be extended: it is a real one.
    let run = run_job(DOER, &task(Act::ExtendThenSucceed)).await?;
    assert_eq!(run.outcome, JobOutcome::Completed);
    Ok(())
}

#[tokio::test]
async fn a_failed_attempt_retries_after_the_workers_backoff_or_its_own_delay() -> anyhow::Result<()>
{
    let run = run_job(DOER, &task(Act::Retry)).await?;
    assert_eq!(
        run.outcome,
        JobOutcome::Retry {
            error: "attempt 1 failed".into(),
            retry_in: Duration::from_secs(7)
        }
    );
    assert_eq!(run.job.state, JobState::Scheduled);
    assert_eq!(run.job.errors.len(), 1);
    assert_eq!(run.job.errors[0].error, "attempt 1 failed");
    let run = run_job(DOER, &task(Act::RetryIn(1500))).await?;
    assert_eq!(
        run.outcome,
        JobOutcome::Retry {
            error: "later".into(),
            retry_in: Duration::from_millis(1500)
        }
    );
    Ok(())
}

#[tokio::test]
async fn permanent_failures_and_last_attempts_are_dead_letters() -> anyhow::Result<()> {
    let run = run_job(DOER, &task(Act::Fail)).await?;
    assert_eq!(
        run.outcome,
        JobOutcome::Failed {
            error: "never".into()
        }
    );
    assert_eq!(run.job.state, JobState::Failed);
    let last = NewJob::of(&task(Act::Retry))?.with_max_attempts(1);
    let run = run_new_job(DOER, last).await?;
    assert_eq!(
        run.outcome,
        JobOutcome::Failed {
            error: "attempt 1 failed".into()
        }
    );
    assert_eq!(run.job.state, JobState::Failed);
    Ok(())
}

#[tokio::test]
async fn a_snooze_does_not_count_an_attempt() -> anyhow::Result<()> {
    let run = run_job(DOER, &task(Act::Snooze(30))).await?;
    assert_eq!(
        run.outcome,
        JobOutcome::Snoozed {
            retry_in: Duration::from_secs(30)
        }
    );
    assert_eq!(run.job.state, JobState::Scheduled);
    assert_eq!(run.job.uncounted, 1);
    Ok(())
}

#[tokio::test]
async fn panics_timeouts_and_undecodable_args_are_failures() -> anyhow::Result<()> {
    let run = run_job(DOER, &task(Act::Panic)).await?;
    let JobOutcome::Retry { error, .. } = run.outcome else {
        panic!("a panic retries: {:?}", run.outcome);
    };
    assert_eq!(error, "panicked: boom");

    // The worker's timeout stops a handler that would never end.
    let quick = Doer {
        timeout: Some(Duration::from_millis(50)),
    };
    let run = run_job(quick, &task(Act::Hang)).await?;
    let JobOutcome::Retry { error, .. } = run.outcome else {
        panic!("a timeout retries: {:?}", run.outcome);
    };
    assert!(error.starts_with("timed out after"), "{error}");

    let garbled = NewJob::new("task", json!({"act": "Dance"}));
    let run = run_new_job(DOER, garbled).await?;
    let JobOutcome::Failed { error } = run.outcome else {
        panic!("bad args fail for good: {:?}", run.outcome);
    };
    assert!(error.contains("do not decode"), "{error}");
    Ok(())
}

#[tokio::test]
async fn jobs_of_another_kind_or_not_due_are_refused() -> anyhow::Result<()> {
    let other = run_new_job(DOER, NewJob::new("other", json!({}))).await;
    assert!(
        matches!(&other, Err(Error::InvalidInput(m)) if m.contains("kind \"other\"")),
        "{other:?}"
    );
    let later = NewJob::of(&task(Act::Succeed))?.with_delay(Duration::from_secs(60));
    let later = run_new_job(DOER, later).await;
    assert!(
        matches!(&later, Err(Error::InvalidInput(m)) if m.contains("not due")),
        "{later:?}"
    );
    Ok(())
}

/// A worker whose own timeout is `Duration::MAX` ("never") runs under `run_job` as under
/// the runtime: the timeout is held to the bound of every duration.
#[tokio::test]
async fn a_worker_that_never_times_out_runs() -> anyhow::Result<()> {
    let never = Doer {
        timeout: Some(Duration::MAX),
    };
    let run = run_job(never, &task(Act::Succeed)).await?;
    assert_eq!(run.outcome, JobOutcome::Completed);
    assert_eq!(run.job.state, JobState::Completed);
    Ok(())
}
