//! Outcomes the database refuses for good (an error message PostgreSQL cannot store, a
//! delay past every bound) never wedge the completer: the one at fault is isolated and
//! skipped, counted and logged, and every other outcome is written.

use std::time::Duration;

use crate::support::{FnWorker, config, wait_for};
use hopper::backend::{ClaimParams, Finish, JobGetParams, Outcome};
use hopper::testing::TestDatabase;
use hopper::{Error, JobError, JobState, NewJob, Runtime, Workers};
use serde_json::json;

job_kind!(Mixed, "mixed");

const QUEUE: &str = "hostile_outcomes";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unstorable_outcome_does_not_stop_the_others() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let mut workers = Workers::new();
    workers.register(FnWorker::new(|_ctx, args: Mixed| async move {
        match args.n {
            // PostgreSQL text cannot hold U+0000: the write fails with a data exception.
            0 => Err(JobError::permanent("bad \0 byte")),
            _ => Ok(()),
        }
    }));
    for n in 0..6 {
        let job = NewJob::of(&Mixed { n })?.with_queue(QUEUE);
        db.backend().job_insert(&job).await?;
    }
    let handle = Runtime::new(db.backend(), workers, config(QUEUE, 1))
        .start()
        .await?;
    let stats = wait_for(&db, QUEUE, Duration::from_secs(15), |s| s.completed == 5).await;
    handle.shutdown_within(Duration::from_secs(1)).await;
    let stats = stats?;
    assert_eq!(
        stats.running, 1,
        "the refused outcome's job waits for its lease"
    );
    Ok(())
}

#[tokio::test]
async fn write_isolating_refuses_only_the_entries_at_fault() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let backend = db.backend();
    for n in 0..4 {
        let job = NewJob::new("k", json!({ "n": n })).with_queue(QUEUE);
        backend.job_insert(&job).await?;
    }
    let claimed = backend
        .job_claim(&ClaimParams {
            queue: QUEUE.to_owned(),
            node: uuid::Uuid::now_v7(),
            limit: 4,
            lease: Duration::from_secs(300),
            kinds: None,
        })
        .await?;
    assert_eq!(claimed.len(), 4);
    let outcomes = [
        Outcome::Completed { duration_ms: 1 },
        Outcome::Retry {
            error: "later".into(),
            retry_in: Duration::MAX,
            duration_ms: 1,
        },
        Outcome::Failed {
            error: "nul \0 here".into(),
            duration_ms: 1,
        },
        Outcome::Snoozed {
            retry_in: Duration::from_secs(60),
        },
    ];
    let finishes: Vec<Finish> = claimed
        .iter()
        .zip(outcomes)
        .map(|(job, outcome)| Finish {
            lease: job.lease,
            outcome,
        })
        .collect();
    let results = hopper::outcomes::write_isolating(&*backend, &finishes).await;
    // The statements of a batch commit one by one: the completion may have landed with the
    // first, refused, try, and then reads as a lost lease when written alone.
    assert!(results[0].is_ok(), "{:?}", results[0]);
    let first = backend
        .job_get(&JobGetParams {
            id: claimed[0].lease.job_id,
        })
        .await?;
    assert_eq!(first.map(|j| j.state), Some(JobState::Completed));
    assert!(
        matches!(&results[1], Err(Error::InvalidInput(m)) if m.contains("retry_in")),
        "{:?}",
        results[1]
    );
    assert!(
        matches!(&results[2], Err(Error::InvalidInput(_))),
        "{:?}",
        results[2]
    );
    assert!(results[3].is_ok(), "{:?}", results[3]);
    let last = backend
        .job_get(&JobGetParams {
            id: claimed[3].lease.job_id,
        })
        .await?;
    assert_eq!(last.map(|j| j.state), Some(JobState::Scheduled));
    let refused = backend
        .job_get(&JobGetParams {
            id: claimed[2].lease.job_id,
        })
        .await?;
    assert_eq!(refused.map(|j| j.state), Some(JobState::Running));
    Ok(())
}
