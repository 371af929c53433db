//! Job metadata (`docs/job-meta-and-logs.md`): stored by every insert path, read back by
//! every read path and handed to the worker with each claim; bad metadata is refused and
//! writes nothing.

use anyhow::ensure;
use hopper_core::backend::JobGetParams;
use hopper_core::{Error, NewJob, QueueUpdate};
use serde_json::{Value, json};

use crate::{Harness, job};

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// A job with a trace context and one more entry.
fn traced(kind: &str, queue: &str, n: u32) -> NewJob {
    job(kind, queue)
        .with_meta_entry("traceparent", TRACEPARENT)
        .with_meta_entry("n", n)
}

/// What `traced(_, _, n)` reads back as.
fn traced_meta(n: u32) -> Value {
    json!({ "traceparent": TRACEPARENT, "n": n })
}

/// Metadata written by the single insert, the bulk insert and the upsert reads back from
/// get, list and every claim statement (plain, grouped, limited); a job without metadata
/// reads as `{}`.
pub async fn meta_round_trips_through_every_path(h: &Harness) -> anyhow::Result<()> {
    let one = traced("k", "plain", 1);
    h.insert(one.clone()).await?;
    let bulk: Vec<NewJob> = (2..5).map(|n| traced("k", "plain", n)).collect();
    h.backend.job_insert_many(&bulk).await?;
    let bare = job("k", "plain");
    h.insert(bare.clone()).await?;

    assert_eq!(h.get(one.id).await?.meta, traced_meta(1));
    assert_eq!(h.get(bulk[2].id).await?.meta, traced_meta(4));
    assert_eq!(h.get(bare.id).await?.meta, json!({}));
    let listed = h
        .backend
        .job_list(&hopper_core::JobListParams {
            queue: Some("plain".into()),
            limit: 10,
            ..Default::default()
        })
        .await?;
    ensure!(listed.len() == 5, "listed {} jobs", listed.len());
    for record in &listed {
        let want = if record.id == bare.id {
            json!({})
        } else {
            let n = record.meta["n"].as_u64().unwrap_or(0);
            traced_meta(u32::try_from(n)?)
        };
        assert_eq!(record.meta, want, "listed job {}", record.id);
    }

    let claimed = h.claim("plain", 10).await?;
    ensure!(claimed.len() == 5, "claimed {} jobs", claimed.len());
    for c in &claimed {
        let stored = h.get(c.lease.job_id).await?;
        assert_eq!(c.meta, stored.meta, "claim of {}", c.lease.job_id);
    }

    if let Some(store) = h.scheduling() {
        let grouped = traced("k", "grouped", 7).with_group("tenant-1");
        let keyed = traced("k", "grouped", 8).with_unique_key("meta-key");
        store
            .job_upsert_many(&[grouped.clone(), keyed.clone()])
            .await?;
        assert_eq!(h.get(grouped.id).await?.meta, traced_meta(7));
        assert_eq!(h.get(keyed.id).await?.meta, traced_meta(8));
        let claimed = h.claim("grouped", 10).await?;
        let mut metas: Vec<Value> = claimed.iter().map(|c| c.meta.clone()).collect();
        metas.sort_by_key(|m| m["n"].as_u64());
        assert_eq!(metas, vec![traced_meta(7), traced_meta(8)], "fair claim");
    }

    h.backend
        .queue_update(&QueueUpdate {
            max_running: Some(Some(5)),
            ..QueueUpdate::new("limited")
        })
        .await?;
    let limited = traced("k", "limited", 9);
    h.insert(limited).await?;
    let claimed = h.claim_one("limited").await?;
    assert_eq!(claimed.meta, traced_meta(9), "limited claim");
    Ok(())
}

/// The replace policy writes the new job's metadata over the holder's, like its args.
pub async fn replace_takes_the_new_jobs_meta(h: &Harness) -> anyhow::Result<()> {
    let Some(store) = h.scheduling() else {
        return Ok(());
    };
    let first = traced("k", "q", 1).with_unique_key("r");
    store.job_upsert_many(std::slice::from_ref(&first)).await?;
    let second = traced("k", "q", 2)
        .with_unique_key("r")
        .with_unique_policy(hopper_core::UniquePolicy::Replace);
    store.job_upsert_many(&[second]).await?;
    assert_eq!(h.get(first.id).await?.meta, traced_meta(2));
    Ok(())
}

/// Oversized metadata, a malformed trace context or U+0000 is refused by every insert
/// path, and nothing of the batch is written.
pub async fn bad_meta_is_refused_and_nothing_is_written(h: &Harness) -> anyhow::Result<()> {
    let huge = job("k", "q").with_meta_entry("blob", "x".repeat(hopper_core::meta::MAX_META_BYTES));
    let bad_trace = job("k", "q").with_meta_entry("traceparent", "00-abc-def-01");
    let not_string = job("k", "q").with_meta_entry("traceparent", 42);
    let nul = job("k", "q").with_meta_entry("k", "a\u{0}b");
    for bad in [huge, bad_trace, not_string, nul] {
        let one = h.backend.job_insert(&bad).await;
        ensure!(
            matches!(one, Err(Error::InvalidInput(_))),
            "single insert of {:?}: {one:?}",
            bad.meta.keys().collect::<Vec<_>>()
        );
        let good = job("k", "q");
        let many = h
            .backend
            .job_insert_many(&[good.clone(), bad.clone()])
            .await;
        ensure!(
            matches!(many, Err(Error::InvalidInput(_))),
            "bulk: {many:?}"
        );
        let got = h.backend.job_get(&JobGetParams { id: good.id }).await?;
        ensure!(got.is_none(), "the good job of a refused batch was written");
        if let Some(store) = h.scheduling() {
            let upsert = store
                .job_upsert_many(&[good.clone().with_unique_key("u"), bad.clone()])
                .await;
            ensure!(
                matches!(upsert, Err(Error::InvalidInput(_))),
                "upsert: {upsert:?}"
            );
        }
    }
    let listed = h
        .backend
        .job_list(&hopper_core::JobListParams {
            limit: 10,
            ..Default::default()
        })
        .await?;
    ensure!(listed.is_empty(), "{} jobs written", listed.len());
    Ok(())
}

/// List and search find jobs by metadata containment: every key of the filter with an
/// equal value (type included); a filter that is not a flat object is refused.
pub async fn list_and_search_filter_by_meta_containment(h: &Harness) -> anyhow::Result<()> {
    let acme = job("k", "q")
        .with_meta_entry("tenant", "acme")
        .with_meta_entry("tier", 1)
        .with_meta_entry("vip", true);
    let acme2 = job("k", "q")
        .with_meta_entry("tenant", "acme")
        .with_meta_entry("tier", 2);
    let other = job("k", "q").with_meta_entry("tenant", "globex");
    let quoted = job("k", "q").with_meta_entry("we\"ird.key", "x'); DROP TABLE jobs; --");
    let bare = job("k", "q");
    for j in [&acme, &acme2, &other, &quoted, &bare] {
        h.insert(j.clone()).await?;
    }
    let found = |filter: Value| async move {
        let list = hopper_core::JobListParams {
            meta: Some(filter),
            limit: 100,
            ..Default::default()
        };
        let listed = h.backend.job_list(&list).await?;
        let searched = h
            .backend
            .job_search(&hopper_core::JobSearchParams {
                list,
                ..Default::default()
            })
            .await?;
        let ids = |v: Vec<hopper_core::JobRecord>| {
            let mut ids: Vec<_> = v.into_iter().map(|j| j.id).collect();
            ids.sort();
            ids
        };
        let (listed, searched) = (ids(listed), ids(searched));
        ensure!(
            listed == searched,
            "list {listed:?} and search {searched:?} differ"
        );
        anyhow::Ok(listed)
    };
    let sorted = |mut v: Vec<uuid::Uuid>| {
        v.sort();
        v
    };
    assert_eq!(
        found(json!({"tenant": "acme"})).await?,
        sorted(vec![acme.id, acme2.id])
    );
    assert_eq!(
        found(json!({"tenant": "acme", "tier": 1})).await?,
        vec![acme.id]
    );
    assert_eq!(found(json!({"vip": true})).await?, vec![acme.id]);
    assert_eq!(
        found(json!({"tier": "1"})).await?,
        Vec::<uuid::Uuid>::new(),
        "a string is not a number"
    );
    assert_eq!(
        found(json!({"tenant": "initech"})).await?,
        Vec::<uuid::Uuid>::new()
    );
    assert_eq!(
        found(json!({"we\"ird.key": "x'); DROP TABLE jobs; --"})).await?,
        vec![quoted.id]
    );
    assert_eq!(
        found(json!({})).await?.len(),
        5,
        "an empty filter matches every job"
    );
    for bad in [
        json!([]),
        json!("tenant"),
        json!({"nested": {"a": 1}}),
        json!({"a": [1]}),
    ] {
        let refused = h
            .backend
            .job_list(&hopper_core::JobListParams {
                meta: Some(bad.clone()),
                limit: 10,
                ..Default::default()
            })
            .await;
        ensure!(
            matches!(refused, Err(Error::InvalidInput(_))),
            "{bad}: {refused:?}"
        );
    }
    Ok(())
}
