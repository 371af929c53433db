//! Jobs a single-queue runtime claims ahead of its free slots (`RuntimeConfig::prefetch`):
//! released untouched at shutdown, dropped unstarted when cancelled while on hand.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper::testing::TestDatabase;
use hopper::{
    Client, JobArgs, JobContext, JobError, JobId, JobListParams, JobState, NewJob, Runtime,
    RuntimeConfig, Worker, Workers,
};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

const QUEUE: &str = "prefetch";

#[derive(Serialize, Deserialize)]
struct Nap {
    n: u64,
    ms: u64,
}

impl JobArgs for Nap {
    const KIND: &'static str = "nap";
}

/// Sleeps `ms` (not at all for 0: tokio's timer would round it up to a millisecond),
/// recording which jobs started.
struct Napper(Arc<Mutex<Vec<u64>>>);

#[async_trait::async_trait]
impl Worker for Napper {
    type Args = Nap;
    async fn process(&self, _ctx: &JobContext, args: Nap) -> Result<(), JobError> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(args.n);
        if args.ms > 0 {
            tokio::time::sleep(Duration::from_millis(args.ms)).await;
        }
        Ok(())
    }
}

/// Workers running [`Napper`], and the list of the jobs it started.
fn nappers() -> (Workers, Arc<Mutex<Vec<u64>>>) {
    let started = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Workers::new();
    workers.register(Napper(started.clone()));
    (workers, started)
}

async fn insert(client: &Client, n: u64, ms: u64) -> anyhow::Result<JobId> {
    Ok(client
        .insert(NewJob::of(&Nap { n, ms })?.with_queue(QUEUE))
        .await?)
}

fn config(concurrency: usize, prefetch: usize) -> RuntimeConfig {
    RuntimeConfig::default()
        .with_queues([QUEUE])
        .with_concurrency(concurrency)
        .with_prefetch(prefetch)
        .with_poll_interval(Duration::from_millis(200))
}

#[tokio::test]
async fn jobs_on_hand_are_released_at_shutdown_without_using_an_attempt() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = Client::new(db.backend());
    for n in 0..20 {
        insert(&client, n, 400).await?;
    }
    let (workers, started) = nappers();
    let handle = Runtime::new(db.backend(), workers, config(2, 4))
        .start()
        .await?;
    // 2 running and 4 on hand: all 6 are `running` in the database.
    db.wait_for(QUEUE, Duration::from_secs(10), |s| s.running == 6)
        .await
        .map_err(anyhow::Error::msg)?;
    handle.shutdown().await;

    let jobs = client
        .jobs(&JobListParams {
            queue: Some(QUEUE.to_owned()),
            limit: 100,
            ..JobListParams::default()
        })
        .await?;
    let ran = started.lock().unwrap_or_else(|e| e.into_inner()).len();
    let completed = jobs
        .iter()
        .filter(|j| j.state == JobState::Completed)
        .count();
    assert_eq!(completed, ran, "every started job completed");
    assert!(
        ran <= 4,
        "only the running ones (and any started meanwhile) ran: {ran}"
    );
    for job in jobs.iter().filter(|j| j.state != JobState::Completed) {
        assert_eq!(job.state, JobState::Available, "{job:?}");
        assert!(job.errors.is_empty(), "released, not failed: {job:?}");
        assert_eq!(job.attempt, job.uncounted, "no attempt used: {job:?}");
    }
    Ok(())
}

#[tokio::test]
async fn a_job_cancelled_while_on_hand_never_starts() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = Client::new(db.backend());
    let (workers, started) = nappers();
    let handle = Runtime::new(db.backend(), workers, config(1, 2))
        .start()
        .await?;
    // Job 0 holds the only slot; jobs 1 and 2 wait on hand.
    insert(&client, 0, 1500).await?;
    let on_hand = insert(&client, 1, 0).await?;
    insert(&client, 2, 0).await?;
    db.wait_for(QUEUE, Duration::from_secs(10), |s| s.running == 3)
        .await
        .map_err(anyhow::Error::msg)?;
    client.cancel(on_hand).await?;
    db.wait_for(QUEUE, Duration::from_secs(10), |s| {
        s.completed == 2 && s.running == 0
    })
    .await
    .map_err(anyhow::Error::msg)?;
    // Give a wrongly started job time to show up.
    let until = Instant::now() + Duration::from_millis(200);
    tokio::time::sleep_until(until).await;
    handle.shutdown().await;
    let ran = started.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert_eq!(ran, vec![0, 2], "the cancelled job must not run");
    let job = client
        .job(on_hand)
        .await?
        .ok_or_else(|| anyhow::anyhow!("gone"))?;
    assert_eq!(job.state, JobState::Cancelled);
    Ok(())
}

/// The default prefetch follows the pace of the jobs: after quick jobs, a runtime keeps a
/// full claim batch on hand while its slots are busy; it keeps twice its concurrency before
/// any job ran and while jobs are slow.
#[tokio::test]
async fn the_default_prefetch_follows_the_pace_of_the_jobs() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let client = Client::new(db.backend());
    let (workers, _started) = nappers();
    let config = config(2, 0)
        .with_prefetch(None)
        .with_claim_batch(100)
        .with_shutdown_timeout(Duration::from_millis(50));
    let handle = Runtime::new(db.backend(), workers, config).start().await?;

    // Slow jobs first: 20 ms each, so the prefetch stays at its floor, 2 x 2. The database
    // counts as running the 2 running, the 4 on hand and the finished ones whose outcome the
    // completer has not written yet: well under the 60 a full batch would lease.
    let most = std::sync::atomic::AtomicU64::new(0);
    let slow: Vec<NewJob> = (0..60)
        .map(|n| NewJob::of(&Nap { n, ms: 20 }).map(|j| j.with_queue(QUEUE)))
        .collect::<Result<_, _>>()?;
    client.insert_many(&slow).await?;
    db.wait_for(QUEUE, Duration::from_secs(20), |s| {
        most.fetch_max(s.running as u64, std::sync::atomic::Ordering::Relaxed);
        s.completed == 60
    })
    .await
    .map_err(anyhow::Error::msg)?;
    let most = most.into_inner();
    assert!(
        most <= 16,
        "2 running and 4 on hand (and outcomes on their way), saw {most} leased"
    );

    // Quick jobs: the mean duration drops to microseconds.
    let quick: Vec<NewJob> = (100..400)
        .map(|n| NewJob::of(&Nap { n, ms: 0 }).map(|j| j.with_queue(QUEUE)))
        .collect::<Result<_, _>>()?;
    client.insert_many(&quick).await?;
    db.wait_for(QUEUE, Duration::from_secs(20), |s| s.completed == 360)
        .await
        .map_err(anyhow::Error::msg)?;

    // Two long jobs take both slots; behind them, what the slots start in 10 ms at the pace
    // of the quick jobs waits on hand: a full batch (100) where a no-op job takes under
    // 0.2 ms, fewer on a machine so loaded that it takes longer (0.37 ms seen with the
    // whole suite running: 54), but far above the floor of slow jobs (4).
    for n in [1000, 1001] {
        insert(&client, n, 60_000).await?;
    }
    db.wait_for(QUEUE, Duration::from_secs(10), |s| s.running == 2)
        .await
        .map_err(anyhow::Error::msg)?;
    let rest: Vec<NewJob> = (2000..2300)
        .map(|n| NewJob::of(&Nap { n, ms: 0 }).map(|j| j.with_queue(QUEUE)))
        .collect::<Result<_, _>>()?;
    client.insert_many(&rest).await?;
    let stats = db
        .wait_for(QUEUE, Duration::from_secs(10), |s| s.running >= 2 + 40)
        .await
        .map_err(anyhow::Error::msg)?;
    assert!(
        stats.running <= 102 && stats.available + stats.running == 302,
        "no more than a batch on hand: {stats:?}"
    );
    handle.shutdown().await;
    Ok(())
}
