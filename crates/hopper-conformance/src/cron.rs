//! Periodic jobs: entries registered once, each tick enqueued once however many nodes
//! advance it. Needs [`hopper_core::backend::SchedulingStore`].

use hopper_core::policy::cron_unique_key;
use hopper_core::{CronAdvance, CronEntry, JobListParams, NewJob, Priority};
use serde_json::json;

use crate::{Harness, secs, t0};

/// A periodic tick is enqueued once: re-registering keeps the stored schedule, and an
/// advance made with a stale `next_run_at` writes nothing.
pub async fn periodic_ticks_are_enqueued_once(h: &Harness) -> anyhow::Result<()> {
    let Some(store) = h.scheduling() else {
        return Ok(());
    };
    let entry = CronEntry {
        name: "nightly".into(),
        schedule: "0 3 * * *".into(),
        timezone: "Europe/Paris".into(),
        queue: "q".into(),
        kind: "report".into(),
        args: json!({ "full": true }),
        priority: Priority::LOW,
        max_attempts: 3,
        timeout_ms: 60_000,
        catch_up: false,
        next_run_at: t0() + secs(60),
        last_run_at: None,
        last_job_id: None,
    };
    store.cron_register(std::slice::from_ref(&entry)).await?;
    // Re-registering with the same schedule keeps the stored next_run_at.
    let mut again = entry.clone();
    again.next_run_at = t0() + secs(3600);
    store.cron_register(&[again]).await?;
    let listed = h.backend.cron_list().await?;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].next_run_at, t0() + secs(60));
    assert_eq!(listed[0].args, json!({ "full": true }));

    let tick = t0() + secs(60);
    let advance = CronAdvance {
        name: "nightly".into(),
        expected_next_run_at: tick,
        next_run_at: tick + secs(86_400),
        jobs: vec![(tick, NewJob::new("report", json!({})).with_queue("q"))],
    };
    assert!(store.cron_advance(&advance).await?);
    assert!(
        !store.cron_advance(&advance).await?,
        "a second node with the old next_run_at writes nothing"
    );
    let jobs = h
        .backend
        .job_list(&JobListParams {
            queue: Some("q".into()),
            limit: 10,
            ..JobListParams::default()
        })
        .await?;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(
        jobs[0].unique_key.as_deref(),
        Some(cron_unique_key("nightly", tick).as_str()),
        "the tick's key"
    );
    let listed = h.backend.cron_list().await?;
    assert_eq!(listed[0].last_run_at, Some(tick));
    assert_eq!(listed[0].next_run_at, tick + secs(86_400));
    Ok(())
}
