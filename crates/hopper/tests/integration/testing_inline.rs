//! `hopper::testing::InlineClient` on both backends: enqueued jobs run before `enqueue`
//! returns, their outcomes are recorded in the database and in the client, and what cannot
//! run inline is said plainly.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hopper::backend::Backend;
use hopper::testing::{
    ExpectedJob, InlineClient, JobOutcome, TestDatabase, require_inserted, require_not_inserted,
};
use hopper::{
    Client, Error, JobArgs, JobContext, JobError, JobState, NewJob, SqliteBackend, SqliteOptions,
    Worker, Workers,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Serialize, Deserialize)]
struct Charge {
    cents: u64,
}

impl JobArgs for Charge {
    const KIND: &'static str = "charge";
}

/// Counts its runs; refuses large charges; cancels its own job for a charge of 0 and
/// waits to be told.
struct Biller {
    runs: Arc<AtomicUsize>,
    client: Client,
}

#[async_trait::async_trait]
impl Worker for Biller {
    type Args = Charge;

    async fn process(&self, ctx: &JobContext, args: Charge) -> Result<(), JobError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        match args.cents {
            0 => {
                self.client.cancel(ctx.id()).await?;
                ctx.cancellation().cancelled().await;
                Ok(())
            }
            c if c > 100_000 => Err(JobError::permanent("over the card's limit")),
            _ => Ok(()),
        }
    }

    fn timeout(&self) -> Option<Duration> {
        // Bounds the wait for a cancellation that would never come.
        Some(Duration::from_secs(20))
    }
}

fn inline(backend: Arc<dyn Backend>) -> (InlineClient, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut workers = Workers::new();
    workers.register(Biller {
        runs: runs.clone(),
        client: Client::new(backend.clone()),
    });
    (InlineClient::new(backend, workers), runs)
}

async fn jobs_run_at_once_and_their_outcomes_are_recorded(
    backend: Arc<dyn Backend>,
) -> anyhow::Result<()> {
    let (inline, runs) = inline(backend);
    let client = inline.client().clone();

    let run = inline.enqueue(&Charge { cents: 500 }).await?;
    assert_eq!(run.outcome, JobOutcome::Completed);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "ran before enqueue returned"
    );
    let stored = require_inserted(
        &client,
        ExpectedJob::of(&Charge { cents: 500 }).state(JobState::Completed),
    )
    .await?;
    assert_eq!(stored.id, run.job.id);

    let run = inline.enqueue(&Charge { cents: 500_000 }).await?;
    assert_eq!(
        run.outcome,
        JobOutcome::Failed {
            error: "over the card's limit".into()
        }
    );
    let run = inline.enqueue(&Charge { cents: 0 }).await?;
    assert_eq!(run.outcome, JobOutcome::Cancelled);
    assert_eq!(run.job.state, JobState::Cancelled);

    // Scheduled for later: inserted, not run.
    let later = NewJob::of(&Charge { cents: 1 })?.with_delay(Duration::from_secs(3600));
    let run = inline.insert(later).await?;
    assert_eq!(run.outcome, JobOutcome::NotRun);
    assert_eq!(run.job.state, JobState::Scheduled);
    assert_eq!(runs.load(Ordering::SeqCst), 3);

    let outcomes: Vec<JobOutcome> = inline.runs().into_iter().map(|r| r.outcome).collect();
    assert_eq!(outcomes.len(), 4);
    assert_eq!(outcomes[0], JobOutcome::Completed);
    assert_eq!(outcomes[3], JobOutcome::NotRun);

    // A kind with no worker is refused before anything is written.
    let unknown = inline.insert(NewJob::new("refund", json!({}))).await;
    assert!(
        matches!(&unknown, Err(Error::InvalidInput(m)) if m.contains("no worker")),
        "{unknown:?}"
    );
    require_not_inserted(&client, ExpectedJob::kind("refund")).await?;

    // Another ready job in the queue: refused, and that job is left alone.
    let waiting = client
        .insert(NewJob::of(&Charge { cents: 2 })?.with_queue("shared"))
        .await?;
    let shared = NewJob::of(&Charge { cents: 3 })?.with_queue("shared");
    let refused = inline.insert(shared).await;
    assert!(
        matches!(&refused, Err(Error::Conflict(m)) if m.contains(&waiting.to_string())),
        "{refused:?}"
    );
    let waiting = client.job(waiting).await?.expect("kept");
    assert_eq!((waiting.state, waiting.attempt), (JobState::Available, 0));
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    Ok(())
}

#[tokio::test]
async fn inline_on_sqlite() -> anyhow::Result<()> {
    let backend = SqliteBackend::open_in_memory(SqliteOptions::default()).await?;
    backend.migrate().await?;
    jobs_run_at_once_and_their_outcomes_are_recorded(Arc::new(backend)).await
}

#[tokio::test]
async fn inline_on_postgres() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    jobs_run_at_once_and_their_outcomes_are_recorded(db.backend()).await
}
