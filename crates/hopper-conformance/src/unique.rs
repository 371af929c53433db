//! Unique keys (docs/scheduling.md): each policy, within one batch and across calls, and
//! windows that hold after the holder finished. Needs [`hopper_core::backend::SchedulingStore`].

use std::time::Duration;

use hopper_core::backend::{JobGetParams, JobPruneParams};
use hopper_core::{Error, InsertOutcome, JobState, NewJob, Priority, UniquePolicy};
use serde_json::json;

use crate::{Harness, completed, job};

/// Two jobs of one batch with the same unique key under the reject policy: the refusal
/// names the two jobs of the batch, not the first as a holder (rolled back with the rest,
/// it never exists); a holder stored before is named as such.
pub async fn two_jobs_of_a_batch_with_one_key_are_named_when_rejected(
    h: &Harness,
) -> anyhow::Result<()> {
    let Some(store) = h.scheduling() else {
        return Ok(());
    };
    let keyed = |key: &str| {
        job("k", "q")
            .with_unique_key(key)
            .with_unique_policy(UniquePolicy::Reject)
    };
    let (plain, first, second) = (job("k", "q"), keyed("twice"), keyed("twice"));
    let result = store
        .job_upsert_many(&[plain.clone(), first.clone(), second])
        .await;
    let Err(Error::Conflict(message)) = result else {
        panic!("a conflict, not {result:?}");
    };
    assert_eq!(
        message,
        "jobs[1] and jobs[2] of the batch share the unique key \"twice\", and the reject \
         policy refuses the second"
    );
    for id in [plain.id, first.id] {
        assert_eq!(
            h.backend
                .job_get(&hopper_core::backend::JobGetParams { id })
                .await?,
            None,
            "nothing of the batch written"
        );
    }

    let holder = keyed("once");
    store.job_upsert_many(std::slice::from_ref(&holder)).await?;
    let result = store.job_upsert_many(&[job("k", "q"), keyed("once")]).await;
    let Err(Error::Conflict(message)) = result else {
        panic!("a conflict, not {result:?}");
    };
    assert_eq!(
        message,
        format!(
            "unique key \"once\" is held by job {} (available)",
            holder.id
        )
    );
    Ok(())
}

/// Unique keys follow their policy: ignore, reject (the whole batch), replace (not a
/// running holder), and a finished holder frees its key.
pub async fn unique_keys_follow_their_policy(h: &Harness) -> anyhow::Result<()> {
    let Some(store) = h.scheduling() else {
        return Ok(());
    };
    let key = "user:42/welcome mail";
    let first = job("k", "q").with_unique_key(key);
    let outcomes = store.job_upsert_many(std::slice::from_ref(&first)).await?;
    assert_eq!(outcomes, vec![InsertOutcome::Inserted]);

    let ignored = job("k", "q").with_unique_key(key);
    assert_eq!(
        store.job_upsert_many(&[ignored]).await?,
        vec![InsertOutcome::Duplicate { existing: first.id }]
    );

    // Reject refuses the whole batch.
    let fresh = job("k", "q");
    let rejected = job("k", "q")
        .with_unique_key(key)
        .with_unique_policy(UniquePolicy::Reject);
    let result = store.job_upsert_many(&[fresh.clone(), rejected]).await;
    assert!(matches!(result, Err(Error::Conflict(_))), "{result:?}");
    assert_eq!(
        h.backend
            .job_get(&hopper_core::backend::JobGetParams { id: fresh.id })
            .await?,
        None,
        "nothing of the batch written"
    );

    let replacement = NewJob::new("other", json!({ "v": 2 }))
        .with_queue("q")
        .with_priority(Priority::HIGH)
        .with_unique_key(key)
        .with_unique_policy(UniquePolicy::Replace);
    assert_eq!(
        store.job_upsert_many(&[replacement]).await?,
        vec![InsertOutcome::Replaced { existing: first.id }]
    );
    let stored = h.get(first.id).await?;
    assert_eq!(
        (stored.kind.as_str(), stored.priority),
        ("other", Priority::HIGH)
    );
    assert_eq!(stored.args, json!({ "v": 2 }));

    // A running holder is not replaced; once it finished, the key is free again.
    let running = h.claim_one("q").await?;
    let late = job("k", "q")
        .with_unique_key(key)
        .with_unique_policy(UniquePolicy::Replace);
    assert_eq!(
        store.job_upsert_many(std::slice::from_ref(&late)).await?,
        vec![InsertOutcome::Duplicate { existing: first.id }]
    );
    h.finish(running.lease, completed()).await?;
    assert_eq!(
        store.job_upsert_many(&[late]).await?,
        vec![InsertOutcome::Inserted]
    );

    // Within one batch, the second job with a key finds the first.
    let a = job("k", "q").with_unique_key("batch");
    let b = job("k", "q").with_unique_key("batch");
    assert_eq!(
        store.job_upsert_many(&[a.clone(), b]).await?,
        vec![
            InsertOutcome::Inserted,
            InsertOutcome::Duplicate { existing: a.id }
        ]
    );
    // Plain inserts honour keys too (ignore: nothing written).
    let c = job("k", "q").with_unique_key("batch");
    h.backend.job_insert(&c).await?;
    assert_eq!(
        h.backend
            .job_get(&hopper_core::backend::JobGetParams { id: c.id })
            .await?,
        None
    );
    Ok(())
}

/// A unique window holds after its job finished, and the next window is free.
pub async fn unique_windows_hold_after_the_job_finished(h: &Harness) -> anyhow::Result<()> {
    let Some(store) = h.scheduling() else {
        return Ok(());
    };
    let hourly = |label: &str| {
        NewJob::new("report", json!({ "label": label }))
            .with_queue("q")
            .with_unique_key("daily-report")
            .with_unique_window(Duration::from_secs(3600))
    };
    let w1 = hourly("one");
    assert_eq!(
        store.job_upsert_many(std::slice::from_ref(&w1)).await?,
        vec![InsertOutcome::Inserted]
    );
    let c = h.claim_one("q").await?;
    h.finish(c.lease, completed()).await?;
    h.advance(Duration::from_secs(60));
    assert_eq!(
        store.job_upsert_many(&[hourly("two")]).await?,
        vec![InsertOutcome::Duplicate { existing: w1.id }],
        "same window, finished holder"
    );
    h.advance(Duration::from_secs(3600));
    assert_eq!(
        store.job_upsert_many(&[hourly("three")]).await?,
        vec![InsertOutcome::Inserted],
        "next window"
    );
    Ok(())
}

/// A finished job keeps its unique window however short the retention: prune leaves it
/// until its window has passed, then deletes it as any other: a retention shorter than the
/// window must not delete the holder and let a second job of the key in within the window.
pub async fn prune_keeps_a_finished_job_until_its_unique_window_passed(
    h: &Harness,
) -> anyhow::Result<()> {
    let Some(store) = h.scheduling() else {
        return Ok(());
    };
    let hour = Duration::from_secs(3600);
    let daily = || {
        job("report", "q")
            .with_unique_key("daily-report")
            .with_unique_window(hour * 24)
    };
    let first = daily();
    store.job_upsert_many(std::slice::from_ref(&first)).await?;
    let plain = h.insert(job("k", "q")).await?;
    for _ in 0..2 {
        let c = h.claim_one("q").await?;
        h.finish(c.lease, completed()).await?;
    }
    let prune = JobPruneParams {
        completed_retention: Duration::ZERO,
        failed_retention: Duration::ZERO,
        limit: 100,
        dry_run: false,
        after: None,
    };
    h.advance(hour);
    let dry_run = JobPruneParams {
        dry_run: true,
        ..prune.clone()
    };
    let counted = h.maintenance().job_prune(&dry_run).await?;
    assert_eq!(
        counted.completed, 1,
        "a dry run counts the same: {counted:?}"
    );
    let pruned = h.maintenance().job_prune(&prune).await?;
    assert_eq!(pruned.completed, 1, "the job without a window: {pruned:?}");
    let got = h.backend.job_get(&JobGetParams { id: plain }).await?;
    assert!(got.is_none(), "pruned");
    assert_eq!(h.get(first.id).await?.state, JobState::Completed, "kept");
    assert_eq!(
        store.job_upsert_many(&[daily()]).await?,
        vec![InsertOutcome::Duplicate { existing: first.id }],
        "the window still holds"
    );
    // The window is a day, epoch-aligned: a day later it has passed whatever the start.
    h.advance(hour * 24);
    let pruned = h.maintenance().job_prune(&prune).await?;
    assert_eq!(pruned.completed, 1, "{pruned:?}");
    let next = daily();
    assert_eq!(
        store.job_upsert_many(std::slice::from_ref(&next)).await?,
        vec![InsertOutcome::Inserted],
        "the next window"
    );
    Ok(())
}
