//! Supervised background tasks: a task that panics or fails is restarted and counted; one
//! that keeps failing makes its process unhealthy, with the cause.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use hopper::Health;
use hopper::supervise::{Policy, supervise};
use tokio_util::sync::CancellationToken;

fn quick() -> Policy {
    Policy::default()
        .with_first_backoff(Duration::from_millis(1))
        .with_max_backoff(Duration::from_millis(5))
        .with_max_failures(3)
        .with_stable_after(Duration::from_secs(60))
}

#[tokio::test]
async fn a_task_that_panics_is_restarted_and_counted() -> anyhow::Result<()> {
    let health = Health::new();
    let runs = Arc::new(AtomicU32::new(0));
    let counter = runs.clone();
    let task = supervise(
        "flaky",
        &health,
        quick(),
        CancellationToken::new(),
        move || {
            let run = counter.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                if run < 3 {
                    panic!("flaky run {run}");
                }
            }
        },
    );
    tokio::time::timeout(Duration::from_secs(5), task).await??;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        3,
        "restarted until it finished"
    );
    assert_eq!(health.task_failures(), 2);
    assert!(health.is_healthy(), "{:?}", health.failure());
    Ok(())
}

#[tokio::test]
async fn a_task_that_keeps_failing_makes_the_process_unhealthy() -> anyhow::Result<()> {
    let health = Health::new();
    let task = supervise(
        "doomed",
        &health,
        quick(),
        CancellationToken::new(),
        || async { Err::<(), _>("the database said no") },
    );
    let failure = tokio::time::timeout(Duration::from_secs(5), health.failed()).await?;
    assert!(failure.contains("doomed"), "{failure}");
    assert!(failure.contains("the database said no"), "{failure}");
    assert!(!health.is_healthy());
    assert_eq!(health.task_failures(), 3);
    tokio::time::timeout(Duration::from_secs(5), task).await??;
    Ok(())
}

#[tokio::test]
async fn stopping_ends_the_wait_between_restarts() -> anyhow::Result<()> {
    let health = Health::new();
    let stop = CancellationToken::new();
    let slow = quick().with_first_backoff(Duration::from_secs(3600));
    let task = supervise("stopped", &health, slow, stop.clone(), || async {
        if true {
            panic!("every time");
        }
    });
    while health.task_failures() == 0 {
        tokio::task::yield_now().await;
    }
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), task).await??;
    assert!(health.is_healthy());
    Ok(())
}
