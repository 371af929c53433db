//! `GET /api/v1/jobs`: filters and cursor pagination.

use std::collections::HashSet;

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::common::{Web, assert_refused, failed};

fn ids(answer: &Value) -> Vec<String> {
    answer["jobs"]
        .as_array()
        .map(|jobs| {
            jobs.iter()
                .filter_map(|j| j["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn pages_walk_every_job_newest_first_without_repeats() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let mut enqueued = Vec::new();
    for n in 0..23 {
        enqueued.push(
            web.enqueue(json!({"kind": "k", "args": {"n": n}}))
                .await?
                .to_string(),
        );
    }
    let mut seen = Vec::new();
    let mut uri = "/api/v1/jobs?limit=10".to_owned();
    let mut pages = 0;
    loop {
        let page = web.get(&uri).await?;
        assert_eq!(page.status, StatusCode::OK, "{page:?}");
        pages += 1;
        seen.extend(ids(&page.json));
        match page.json["next_before"].as_str() {
            Some(cursor) => uri = format!("/api/v1/jobs?limit=10&before={cursor}"),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    enqueued.reverse();
    assert_eq!(seen, enqueued, "newest first, each once");

    // Exactly a page full: no cursor to an empty page.
    let page = web.get("/api/v1/jobs?limit=23").await?;
    assert_eq!(ids(&page.json).len(), 23);
    assert!(page.json["next_before"].is_null());
    Ok(())
}

#[tokio::test]
async fn filters_by_queue_state_kind_and_time() -> anyhow::Result<()> {
    let web = Web::new().await?;
    web.enqueue(json!({"kind": "mail", "queue": "q1", "max_attempts": 1}))
        .await?;
    web.enqueue(json!({"kind": "mail", "queue": "q2"})).await?;
    web.enqueue(json!({"kind": "sms", "queue": "q2"})).await?;
    web.work("q1", failed()).await?;

    let count = |v: &Value| ids(v).len();
    assert_eq!(count(&web.get("/api/v1/jobs").await?.json), 3);
    assert_eq!(count(&web.get("/api/v1/jobs?queue=q2").await?.json), 2);
    assert_eq!(count(&web.get("/api/v1/jobs?kind=mail").await?.json), 2);
    assert_eq!(
        count(&web.get("/api/v1/jobs?queue=q2&kind=sms").await?.json),
        1
    );
    let failed_jobs = web.get("/api/v1/jobs?state=failed").await?;
    assert_eq!(count(&failed_jobs.json), 1);
    assert_eq!(failed_jobs.json["jobs"][0]["queue"], "q1");
    // Empty values, as a form sends them, mean no filter.
    assert_eq!(
        count(&web.get("/api/v1/jobs?queue=&state=&kind=").await?.json),
        3
    );

    // Time range on created_at: everything is from the last minute, nothing from 2000.
    let since = (chrono::Utc::now() - chrono::TimeDelta::minutes(1)).to_rfc3339();
    let since = since.replace('+', "%2B");
    assert_eq!(
        count(&web.get(&format!("/api/v1/jobs?since={since}")).await?.json),
        3
    );
    let old = web
        .get("/api/v1/jobs?since=2000-01-01T00:00:00Z&until=2000-01-02T00:00:00Z")
        .await?;
    assert_eq!(old.status, StatusCode::OK, "{old:?}");
    assert_eq!(count(&old.json), 0);
    let until_now = chrono::Utc::now().to_rfc3339().replace('+', "%2B");
    let all: HashSet<_> = ids(&web
        .get(&format!("/api/v1/jobs?until={until_now}"))
        .await?
        .json)
    .into_iter()
    .collect();
    assert_eq!(all.len(), 3);
    Ok(())
}

#[tokio::test]
async fn bad_filters_are_named() -> anyhow::Result<()> {
    let web = Web::new().await?;
    for (query, expected) in [
        ("state=done", "unknown state"),
        ("queue=a%20b", "queue name"),
        ("kind=a;b", "kind name"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("limit=ten", "limit"),
        ("before=zzz", "before"),
        ("since=yesterday", "since"),
        (
            "since=2030-01-01T00:00:00Z&until=2020-01-01T00:00:00Z",
            "must be before",
        ),
        ("colour=blue", "colour"),
    ] {
        assert_refused(&web, &format!("/api/v1/jobs?{query}"), expected).await?;
    }
    Ok(())
}

#[tokio::test]
async fn a_listing_of_large_jobs_stays_small_and_names_their_sizes() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let client = hopper::Client::new(web.backend());
    let big = json!([String::from("x").repeat(1_000_000 - 4)]);
    let note = String::from("n").repeat(5_000);
    let mut ids = Vec::new();
    for _ in 0..20 {
        let job = hopper::NewJob::new("big", big.clone()).with_meta_entry("note", note.as_str());
        ids.push(client.insert(job).await?.to_string());
    }
    let small = web
        .enqueue(json!({"kind": "small", "args": {"n": 1}}))
        .await?;

    let page = web.get("/api/v1/jobs?limit=500").await?;
    assert_eq!(page.status, StatusCode::OK, "{page:?}");
    // 21 jobs of 1 MB would be 21 MB; listed, each is a few hundred bytes.
    assert!(page.text.len() < 64 * 1024, "{} bytes", page.text.len());
    let jobs = page.json["jobs"].as_array().cloned().unwrap_or_default();
    assert_eq!(jobs.len(), 21);
    assert_eq!(jobs[0]["id"], json!(small.to_string()));
    assert_eq!(jobs[0]["args"], json!({"n": 1}));
    assert!(jobs[0].get("args_bytes").is_none(), "{}", jobs[0]);
    for job in &jobs[1..] {
        assert_eq!(job["args"], Value::Null, "{job}");
        assert_eq!(job["args_bytes"], json!(1_000_000), "{job}");
        assert_eq!(job["meta"], Value::Null, "{job}");
        let meta_bytes = job["meta_bytes"].as_u64().unwrap_or(0);
        assert!((5_000..5_020).contains(&meta_bytes), "{job}");
    }

    // The job itself is read whole.
    let one = web.get(&format!("/api/v1/jobs/{}", ids[0])).await?;
    assert_eq!(one.status, StatusCode::OK);
    assert_eq!(one.json["args"], big);
    assert_eq!(one.json["meta"], json!({ "note": note }));
    assert!(one.json.get("args_bytes").is_none());
    Ok(())
}
