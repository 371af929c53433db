//! Inserting, reading, listing and counting jobs; migrations.

use std::time::Duration;

use anyhow::ensure;
use hopper_core::backend::{JobCancelParams, JobGetParams};
use hopper_core::{Error, JobId, JobListParams, JobState, LISTED_VALUE_BYTES, NewJob, Priority};
use serde_json::json;
use uuid::Uuid;

use crate::{Harness, completed, job, secs};

/// Insert then get returns every field.
pub async fn insert_then_get_returns_every_field(h: &Harness) -> anyhow::Result<()> {
    let new = NewJob::new("send_email", json!({ "to": "a@example.com", "n": [1, 2] }))
        .with_queue("mail")
        .with_priority(Priority::HIGH)
        .with_max_attempts(7)
        .with_timeout(Duration::from_millis(1500));
    let id = h.insert(new.clone()).await?;
    let got = h.get(id).await?;
    assert_eq!(got.id, id);
    assert_eq!(got.queue, "mail");
    assert_eq!(got.kind, "send_email");
    assert_eq!(got.args, new.args);
    assert_eq!(got.state, JobState::Available);
    assert_eq!(got.priority, Priority::HIGH);
    assert_eq!(
        got.run_at,
        h.now(),
        "run_at defaults to the backend clock's now"
    );
    assert_eq!((got.attempt, got.uncounted), (0, 0));
    assert_eq!(got.max_attempts, 7);
    assert_eq!(got.timeout_ms, 1500);
    assert_eq!(got.node_id, None);
    assert_eq!(got.lease_expires_at, None);
    assert_eq!(
        (got.attempted_at, got.finished_at, got.duration_ms),
        (None, None, None)
    );
    assert!(got.errors.is_empty());
    Ok(())
}

/// Group and unique key round trip.
pub async fn group_and_unique_key_round_trip(h: &Harness) -> anyhow::Result<()> {
    let keyed = NewJob::new("sync", json!({}))
        .with_queue("t")
        .with_group("tenant-7")
        .with_unique_key("sync:tenant-7/full");
    let grouped = NewJob::new("sync", json!({}))
        .with_queue("t")
        .with_group("tenant-8");
    let plain = NewJob::new("sync", json!({})).with_queue("t");
    let ids: Vec<JobId> = [&keyed, &grouped, &plain].iter().map(|j| j.id).collect();
    let Some(store) = h.scheduling() else {
        return Ok(());
    };
    store
        .job_upsert_many(&[keyed.clone(), grouped, plain])
        .await?;
    let got = h.get(ids[0]).await?;
    assert_eq!(got.group.as_deref(), Some("tenant-7"));
    assert_eq!(got.unique_key.as_deref(), Some("sync:tenant-7/full"));
    let got = h.get(ids[1]).await?;
    assert_eq!(
        (got.group.as_deref(), got.unique_key),
        (Some("tenant-8"), None)
    );
    // An ungrouped job of a grouped queue reads as having no group.
    let got = h.get(ids[2]).await?;
    assert_eq!((got.group, got.unique_key), (None, None));

    let list = |group: Option<&str>| {
        let params = hopper_core::backend::JobSearchParams {
            list: JobListParams {
                queue: Some("t".into()),
                group: group.map(str::to_owned),
                limit: 100,
                ..JobListParams::default()
            },
            ..hopper_core::backend::JobSearchParams::default()
        };
        async move { h.backend.job_search(&params).await }
    };
    let all = list(None).await?;
    assert_eq!(ids_of(&all), vec![ids[2], ids[1], ids[0]]);
    assert_eq!(all[2].unique_key.as_deref(), Some("sync:tenant-7/full"));
    assert_eq!(ids_of(&list(Some("tenant-7")).await?), vec![ids[0]]);
    assert!(list(Some("tenant-9")).await?.is_empty());
    // The time-range search filters by group too.
    let got = h.get(ids[0]).await?;
    let ranged = h
        .backend
        .job_search(&hopper_core::backend::JobSearchParams {
            list: JobListParams {
                group: Some("tenant-8".into()),
                limit: 10,
                ..JobListParams::default()
            },
            created_after: Some(got.created_at),
            created_before: None,
        })
        .await?;
    assert_eq!(ids_of(&ranged), vec![ids[1]]);
    Ok(())
}

/// Get of unknown id is none.
pub async fn get_of_unknown_id_is_none(h: &Harness) -> anyhow::Result<()> {
    h.insert(job("k", "default")).await?;
    assert_eq!(
        h.backend
            .job_get(&JobGetParams { id: Uuid::now_v7() })
            .await?,
        None
    );
    Ok(())
}

/// Insert many writes 100k jobs in one call.
pub async fn insert_many_writes_100k_jobs_in_one_call(h: &Harness) -> anyhow::Result<()> {
    const N: usize = 100_000;
    let jobs: Vec<NewJob> = (0..N)
        .map(|n| NewJob::new("bulk", json!({ "n": n })).with_queue("bulk"))
        .collect();
    h.backend.job_insert_many(&jobs).await?;
    let stats = h.backend.queue_stats().await?;
    let bulk = stats
        .iter()
        .find(|s| s.queue == "bulk")
        .expect("the bulk queue is counted");
    assert_eq!(bulk.available, N as i64);
    assert_eq!(bulk.scheduled + bulk.running + bulk.completed, 0);
    for n in [0, N / 2, N - 1] {
        let got = h.get(jobs[n].id).await?;
        assert_eq!(got.args, json!({ "n": n }));
        assert_eq!(got.state, JobState::Available);
        assert_eq!(got.run_at, h.now());
    }
    Ok(())
}

/// Insert many of nothing is a no op.
pub async fn insert_many_of_nothing_is_a_no_op(h: &Harness) -> anyhow::Result<()> {
    h.backend.job_insert_many(&[]).await?;
    assert!(h.backend.queue_stats().await?.is_empty());
    Ok(())
}

/// Five jobs over two queues and two kinds, one of them running.
async fn listing_fixture(h: &Harness) -> anyhow::Result<Vec<JobId>> {
    let mut ids = Vec::new();
    for (kind, queue) in [("x", "a"), ("y", "a"), ("x", "b"), ("y", "b"), ("x", "a")] {
        ids.push(h.insert(job(kind, queue)).await?);
    }
    let claimed = h.claim_one("b").await?;
    ensure!(
        claimed.lease.job_id == ids[2],
        "the oldest job of b is claimed"
    );
    Ok(ids)
}

fn ids_of(jobs: &[hopper_core::JobRecord]) -> Vec<JobId> {
    jobs.iter().map(|j| j.id).collect()
}

/// List filters by queue state and kind.
pub async fn list_filters_by_queue_state_and_kind(h: &Harness) -> anyhow::Result<()> {
    let ids = listing_fixture(h).await?;
    let list = |queue: Option<&str>, state: Option<JobState>, kind: Option<&str>| {
        let params = JobListParams {
            queue: queue.map(str::to_owned),
            state,
            kind: kind.map(str::to_owned),
            group: None,
            meta: None,
            before: None,
            limit: 100,
        };
        async move { h.backend.job_list(&params).await }
    };
    // Newest first throughout.
    assert_eq!(
        ids_of(&list(None, None, None).await?),
        vec![ids[4], ids[3], ids[2], ids[1], ids[0]]
    );
    assert_eq!(
        ids_of(&list(Some("a"), None, None).await?),
        vec![ids[4], ids[1], ids[0]]
    );
    assert_eq!(
        ids_of(&list(None, None, Some("x")).await?),
        vec![ids[4], ids[2], ids[0]]
    );
    assert_eq!(
        ids_of(&list(None, Some(JobState::Running), None).await?),
        vec![ids[2]]
    );
    assert_eq!(
        ids_of(&list(Some("b"), Some(JobState::Available), Some("y")).await?),
        vec![ids[3]]
    );
    assert!(list(Some("c"), None, None).await?.is_empty());
    assert!(
        list(None, Some(JobState::Completed), None)
            .await?
            .is_empty()
    );
    Ok(())
}

/// List pages newest first with before cursor.
pub async fn list_pages_newest_first_with_before_cursor(h: &Harness) -> anyhow::Result<()> {
    let mut ids = Vec::new();
    for _ in 0..7 {
        ids.push(h.insert(job("page", "default")).await?);
    }
    ids.reverse(); // newest first
    let mut seen = Vec::new();
    let mut before = None;
    let mut pages = Vec::new();
    loop {
        let page = h
            .backend
            .job_list(&JobListParams {
                before,
                limit: 3,
                ..JobListParams::default()
            })
            .await?;
        if page.is_empty() {
            break;
        }
        pages.push(page.len());
        before = page.last().map(|j| j.id);
        seen.extend(ids_of(&page));
        ensure!(pages.len() < 10, "paging does not end");
    }
    assert_eq!(pages, vec![3, 3, 1]);
    assert_eq!(seen, ids);
    // The cursor composes with filters.
    let after_third = h
        .backend
        .job_list(&JobListParams {
            kind: Some("page".into()),
            before: Some(ids[2]),
            limit: 100,
            ..JobListParams::default()
        })
        .await?;
    assert_eq!(ids_of(&after_third), ids[3..].to_vec());
    Ok(())
}

/// Args whose JSON text (`["xx…"]`, the same bytes as every backend writes it) is `bytes`
/// long.
fn args_of(bytes: usize) -> serde_json::Value {
    json!([String::from("x").repeat(bytes - 4)])
}

/// A listing leaves out an `args` or `meta` longer than [`LISTED_VALUE_BYTES`] (`null`,
/// its size said), keeps one of exactly that size, and filters and pages as ever; reading
/// the job alone gives it whole.
pub async fn listings_leave_out_values_over_the_listed_bound(h: &Harness) -> anyhow::Result<()> {
    let bound = LISTED_VALUE_BYTES;
    let kept = h.insert(NewJob::new("k", args_of(bound))).await?;
    let over = h.insert(NewJob::new("k", args_of(bound + 1))).await?;
    let note = String::from("n").repeat(bound);
    let large = h
        .insert(NewJob::new("k", args_of(1_000_000)).with_meta_entry("note", note.as_str()))
        .await?;
    let search = hopper_core::JobSearchParams {
        list: JobListParams {
            kind: Some("k".into()),
            limit: 10,
            ..JobListParams::default()
        },
        ..hopper_core::JobSearchParams::default()
    };
    for listed in [
        h.backend.job_list(&search.list).await?,
        h.backend.job_search(&search).await?,
    ] {
        assert_eq!(ids_of(&listed), vec![large, over, kept]);
        let (l, o, k) = (&listed[0], &listed[1], &listed[2]);
        assert_eq!(
            k.args,
            args_of(bound),
            "a value of the bound itself is listed"
        );
        assert_eq!((k.args_bytes, k.meta_bytes), (None, None));
        assert!(!k.is_abridged());
        assert_eq!(o.args, serde_json::Value::Null);
        assert_eq!(o.args_bytes, Some(bound as u64 + 1));
        assert_eq!((o.meta.clone(), o.meta_bytes), (json!({}), None));
        assert_eq!(l.args, serde_json::Value::Null);
        assert_eq!(l.args_bytes, Some(1_000_000));
        assert_eq!(l.meta, serde_json::Value::Null);
        // PostgreSQL writes a space after `:`, SQLite writes the JSON as given.
        let meta_bytes = l.meta_bytes.unwrap_or(0);
        ensure!(
            (bound as u64 + 11..=bound as u64 + 12).contains(&meta_bytes),
            "meta of {meta_bytes} bytes"
        );
        assert!(l.is_abridged() && o.is_abridged());
    }
    let whole = h.get(large).await?;
    assert_eq!(whole.args, args_of(1_000_000));
    assert_eq!(whole.meta, json!({ "note": note }));
    assert_eq!((whole.args_bytes, whole.meta_bytes), (None, None));
    Ok(())
}

/// Queue stats count every state.
pub async fn queue_stats_count_every_state(h: &Harness) -> anyhow::Result<()> {
    // available (2, one of them 60 s old), scheduled, running, completed, failed, cancelled
    let old = h
        .insert(job("s", "q").with_run_at(h.now() - secs(60)))
        .await?;
    h.insert(job("s", "q")).await?;
    h.insert(job("s", "q").with_run_at(h.now() + secs(60)))
        .await?;
    let run = h.insert(job("s", "q").with_priority(Priority(-3))).await?;
    let done = h.insert(job("s", "q").with_priority(Priority(-2))).await?;
    let dead = h.insert(job("s", "q").with_priority(Priority(-1))).await?;
    let gone = h.insert(job("s", "q")).await?;
    h.insert(job("s", "other")).await?;
    let mut claimed = h.claim("q", 3).await?;
    claimed.sort_by_key(|c| c.priority);
    let ids: Vec<JobId> = claimed.iter().map(|c| c.lease.job_id).collect();
    assert_eq!(ids, vec![run, done, dead]);
    h.finish(claimed[1].lease, completed()).await?;
    h.finish(
        claimed[2].lease,
        hopper_core::backend::Outcome::Failed {
            error: "no".into(),
            duration_ms: 1,
        },
    )
    .await?;
    h.backend.job_cancel(&JobCancelParams { id: gone }).await?;
    let stats = h.backend.queue_stats().await?;
    let queues: Vec<&str> = stats.iter().map(|s| s.queue.as_str()).collect();
    assert_eq!(queues, vec!["other", "q"], "one row per queue, by name");
    let q = &stats[1];
    assert_eq!(
        (
            q.available,
            q.scheduled,
            q.running,
            q.completed,
            q.failed,
            q.cancelled
        ),
        (2, 1, 1, 1, 1, 1),
        "{q:?}"
    );
    assert!(
        (q.oldest_available_secs - 60.0).abs() < 0.001,
        "the oldest available job ({old}) is 60 s old: {q:?}"
    );
    Ok(())
}

/// Migrate twice is a no op.
pub async fn migrate_twice_is_a_no_op(h: &Harness) -> anyhow::Result<()> {
    let id = h.insert(job("keep", "default")).await?;
    h.backend.migrate().await?;
    h.backend.migrate().await?;
    let got = h.get(id).await?;
    assert_eq!(got.state, JobState::Available);
    let all = h
        .backend
        .job_list(&JobListParams {
            limit: 100,
            ..JobListParams::default()
        })
        .await?;
    assert_eq!(ids_of(&all), vec![id]);
    let claimed = h.claim_one("default").await?;
    assert_eq!(claimed.lease.job_id, id);
    Ok(())
}

/// A second insert of a job id is a conflict, which says the id is taken (not the
/// database's words about a constraint), alone, in a batch, and with a unique key.
pub async fn duplicate_ids_are_a_conflict(h: &Harness) -> anyhow::Result<()> {
    let j = job("k", "default");
    h.insert(j.clone()).await?;
    let taken = format!("a job with id {} already exists", j.id);
    let said = |result: Result<_, Error>| match result {
        Err(Error::Conflict(message)) => assert_eq!(message, taken),
        other => panic!("a conflict saying {taken:?}, not {other:?}"),
    };
    said(h.backend.job_insert(&j).await);
    said(
        h.backend
            .job_insert_many(&[job("k", "default"), j.clone()])
            .await,
    );
    if let Some(store) = h.scheduling() {
        let keyed = j.clone().with_unique_key("free key");
        said(store.job_upsert_many(&[keyed]).await.map(|_| ()));
    }
    Ok(())
}
