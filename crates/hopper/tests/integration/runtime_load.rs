//! Many runtimes on one queue: every job completes exactly once, and no job is ever run by
//! two handlers at the same time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{FnWorker, config, connect, node_backend, wait_for};
use hopper::testing::TestDatabase;
use hopper::{Client, JobArgs, JobId, NewJob, Runtime, Workers};

job_kind!(Load, "load");

const RUNTIMES: usize = 8;
const CONCURRENCY: usize = 16;
const JOBS: usize = 20_000;

/// What the handlers saw: per job, the handlers running it now and every lease it ran under.
#[derive(Default)]
struct Tracker {
    jobs: Mutex<HashMap<JobId, (u32, Vec<i32>)>>,
    overlaps: AtomicUsize,
}

impl Tracker {
    fn start(&self, id: JobId, attempt: i32) {
        let mut jobs = self.jobs.lock().expect("not poisoned");
        let (active, attempts) = jobs.entry(id).or_default();
        *active += 1;
        attempts.push(attempt);
        if *active > 1 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn end(&self, id: JobId) {
        let mut jobs = self.jobs.lock().expect("not poisoned");
        if let Some((active, _)) = jobs.get_mut(&id) {
            *active -= 1;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_runtimes_complete_every_job_exactly_once() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let tracker = Arc::new(Tracker::default());
    let mut handles = Vec::new();
    for _ in 0..RUNTIMES {
        let tracker = tracker.clone();
        let mut workers = Workers::new();
        workers.register(FnWorker::new(move |ctx, _args: Load| {
            let tracker = tracker.clone();
            async move {
                tracker.start(ctx.id(), ctx.lease().attempt);
                // Give the other handlers a chance to run in between.
                tokio::task::yield_now().await;
                tracker.end(ctx.id());
                Ok(())
            }
        }));
        let mut config = config("load", CONCURRENCY);
        config.poll_interval = Duration::from_millis(500);
        let backend = node_backend(&db, 3).await?;
        handles.push(Runtime::new(backend, workers, config).start().await?);
    }
    let jobs: Vec<NewJob> = (0..JOBS as u64)
        .map(|n| NewJob::of(&Load { n }).map(|j| j.with_queue("load")))
        .collect::<Result<_, _>>()?;
    Client::new(db.backend()).insert_many(&jobs).await?;
    let stats = wait_for(&db, "load", Duration::from_secs(60), |s| {
        s.completed == JOBS as i64
    })
    .await?;
    futures_util::future::join_all(handles.into_iter().map(|h| h.shutdown())).await;

    assert_eq!(stats.completed, JOBS as i64, "{stats:?}");
    assert_eq!(tracker.overlaps.load(Ordering::SeqCst), 0);
    {
        let seen = tracker.jobs.lock().expect("not poisoned");
        assert_eq!(seen.len(), JOBS, "every job ran");
        for job in &jobs {
            let (active, attempts) = &seen[&job.id];
            assert_eq!(
                (*active, attempts.as_slice()),
                (0, &[1][..]),
                "job {}",
                job.id
            );
        }
    }
    let sql = connect(db.url()).await?;
    let row = sql
        .query_one(
            &format!(
                "SELECT count(*) FILTER (WHERE attempt <> 1 OR jsonb_array_length(errors) > 0),
                        count(DISTINCT node_id)
                 FROM {}.jobs WHERE kind = $1",
                db.schema()
            ),
            &[&Load::KIND],
        )
        .await?;
    let (retried, nodes): (i64, i64) = (row.get(0), row.get(1));
    assert_eq!(retried, 0, "no job needed a second attempt");
    assert_eq!(nodes, RUNTIMES as i64, "every runtime took a share");
    Ok(())
}
