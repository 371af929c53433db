//! Failover to a promoted standby under synchronous replication: two private clusters (a
//! primary and a streaming standby made with `pg_basebackup -R`,
//! `synchronous_commit = remote_apply`), a runtime and a producer working through a
//! multi-host URL with `target_session_attrs=read-write`, the primary killed
//! (`pg_ctl stop -m immediate`) mid-run and the standby promoted. Every job whose insert
//! was acknowledged must complete on the new primary; a job whose handler ran twice must
//! have run under two different attempts (its first lease fenced off).
//!
//! Prints the figures (time to resume, lost, run twice) that `docs/deployment.md` quotes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::FnWorker;
use hopper::backend::Backend;
use hopper::testing::{StopMode, TestCluster};
use hopper::{
    Client, JobId, NewJob, PgBackend, PgConnectOptions, PgOptions, Runtime, RuntimeConfig, Workers,
};
use tokio::sync::Notify;

job_kind!(Work, "failover_work");

const QUEUE: &str = "failover";
/// Jobs enqueued before the run, and how many must have run before the primary dies.
const UPFRONT: u64 = 1_500;
const KILL_AFTER: usize = 400;

/// Each handler run: the job and the attempt it ran under.
type Runs = Arc<Mutex<Vec<(JobId, i32)>>>;

fn setup() -> anyhow::Result<(TestCluster, TestCluster)> {
    let primary = TestCluster::init().map_err(anyhow::Error::msg)?;
    primary
        .append_conf(&[
            "synchronous_standby_names = 'standby1'",
            "synchronous_commit = remote_apply",
        ])
        .map_err(anyhow::Error::msg)?;
    primary.start().map_err(anyhow::Error::msg)?;
    let standby = TestCluster::standby_of(&primary, "standby1").map_err(anyhow::Error::msg)?;
    standby.start().map_err(anyhow::Error::msg)?;
    Ok((primary, standby))
}

/// Waits until the standby is the primary's synchronous standby.
async fn wait_until_synchronous(primary: &TestCluster) -> anyhow::Result<()> {
    let client = PgConnectOptions::parse(&primary.url("sslmode=disable"))?
        .connect()
        .await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let sync: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
                &[],
            )
            .await?
            .get(0);
        if sync == 1 {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the standby never became synchronous"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_resumes_on_the_promoted_standby_and_nothing_is_lost() -> anyhow::Result<()> {
    let (primary, standby) = setup()?;
    // A hang fails the test (and the clusters are still dropped).
    tokio::time::timeout(Duration::from_secs(150), run(&primary, &standby))
        .await
        .map_err(|_| anyhow::anyhow!("the failover run did not finish within 150 s"))?
}

async fn run(primary: &TestCluster, standby: &TestCluster) -> anyhow::Result<()> {
    wait_until_synchronous(primary).await?;
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write&connect_timeout=2&sslmode=disable",
        primary.port(),
        standby.port()
    );
    let backend: Arc<dyn Backend> =
        Arc::new(PgBackend::connect(&url, PgOptions::default().with_pool_size(12)).await?);
    backend.migrate().await?;
    let client = Client::new(backend.clone());
    let upfront: Vec<NewJob> = (0..UPFRONT)
        .map(|n| NewJob::of(&Work { n }).map(|job| job.with_queue(QUEUE)))
        .collect::<Result<_, _>>()?;
    client.insert_many(&upfront).await?;
    let mut acknowledged: Vec<JobId> = upfront.iter().map(|job| job.id).collect();

    let runs: Runs = Arc::default();
    let half_way = Arc::new(Notify::new());
    let mut workers = Workers::new();
    let (recorded, signal) = (runs.clone(), half_way.clone());
    workers.register(FnWorker::new(move |ctx, _: Work| {
        let (recorded, signal) = (recorded.clone(), signal.clone());
        async move {
            let n = {
                let mut runs = recorded.lock().expect("not poisoned");
                runs.push((ctx.id(), ctx.attempt()));
                runs.len()
            };
            if n == KILL_AFTER {
                signal.notify_one();
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
            Ok(())
        }
    }));
    let config = RuntimeConfig::default()
        .with_queues([QUEUE])
        .with_concurrency(8)
        .with_lease(Duration::from_secs(3))
        .with_heartbeat_interval(Duration::from_millis(300))
        .with_rescue_interval(Duration::from_millis(100))
        .with_poll_interval(Duration::from_millis(200))
        .with_shutdown_timeout(Duration::from_secs(5));
    let runtime = Runtime::new(backend.clone(), workers, config)
        .start()
        .await?;

    // A producer that keeps inserting one job at a time through the failover; only the
    // inserts that returned Ok are promised.
    let producing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let producer = {
        let (client, producing) = (client.clone(), producing.clone());
        tokio::spawn(async move {
            let mut promised = Vec::new();
            let mut failed = 0_u64;
            let mut n = UPFRONT;
            while producing.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let job = NewJob::of(&Work { n }).expect("encodes").with_queue(QUEUE);
                match client.insert(job).await {
                    Ok(id) => promised.push(id),
                    Err(_) => {
                        failed += 1;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (promised, failed)
        })
    };

    tokio::time::timeout(Duration::from_secs(60), half_way.notified()).await?;
    let killed_at = Instant::now();
    let killed_at_wall = chrono::Utc::now();
    primary
        .stop(StopMode::Immediate)
        .map_err(anyhow::Error::msg)?;
    standby.promote().map_err(anyhow::Error::msg)?;
    let promoted_after = killed_at.elapsed();

    // Resumed: the first outcome written on the new primary after the kill.
    let check = PgConnectOptions::parse(&standby.url("sslmode=disable"))?
        .connect()
        .await?;
    let resumed_after = loop {
        let written: i64 = check
            .query_one(
                "SELECT count(*) FROM hopper.jobs WHERE state = 'completed' AND finished_at > $1",
                &[&killed_at_wall],
            )
            .await?
            .get(0);
        if written > 0 {
            break killed_at.elapsed();
        }
        anyhow::ensure!(
            killed_at.elapsed() < Duration::from_secs(60),
            "work did not resume within 60 s of the failover"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    // Let the producer insert on the new primary for a moment, then stop it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    producing.store(false, std::sync::atomic::Ordering::Relaxed);
    let (promised, failed_inserts) = producer.await?;
    acknowledged.extend(promised);

    // Every acknowledged job completes on the new primary.
    let deadline = Instant::now() + Duration::from_secs(60);
    let (completed, attempts) = loop {
        let rows = check
            .query(
                "SELECT id, state::text, attempt FROM hopper.jobs WHERE id = ANY($1)",
                &[&acknowledged],
            )
            .await?;
        let completed = rows
            .iter()
            .filter(|r| r.get::<_, String>(1) == "completed")
            .count();
        if completed == acknowledged.len() || Instant::now() > deadline {
            let attempts: HashMap<JobId, i32> = rows.iter().map(|r| (r.get(0), r.get(2))).collect();
            break (completed, attempts);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    runtime.shutdown().await;
    let lost = acknowledged.len() - completed;

    // Jobs whose handler ran more than once: each run must hold its own attempt (a new
    // lease), so the earlier run's outcome could not have been written over the later.
    let mut by_job: HashMap<JobId, Vec<i32>> = HashMap::new();
    for (id, attempt) in runs.lock().expect("not poisoned").iter() {
        by_job.entry(*id).or_default().push(*attempt);
    }
    let twice: Vec<(&JobId, &Vec<i32>)> = by_job.iter().filter(|(_, a)| a.len() > 1).collect();
    for (id, attempts_run) in &twice {
        let mut distinct = (*attempts_run).clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(
            distinct.len(),
            attempts_run.len(),
            "job {id} ran twice under one attempt: {attempts_run:?}"
        );
        let stored = attempts.get(*id).copied().unwrap_or_default();
        assert!(
            distinct.iter().all(|a| *a <= stored),
            "job {id}: runs {attempts_run:?}, stored attempt {stored}"
        );
    }
    println!(
        "failover figures: {} jobs acknowledged, {lost} lost, {} run twice (each under a new attempt); \
         standby promoted {promoted_after:?} after the kill, work resumed {resumed_after:?} after the kill; \
         {failed_inserts} inserts refused during the failover",
        acknowledged.len(),
        twice.len(),
    );
    assert_eq!(lost, 0, "acknowledged jobs lost in the failover");
    Ok(())
}
