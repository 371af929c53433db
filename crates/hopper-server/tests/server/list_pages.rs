//! `list_jobs` through the server: a page of large jobs stays small (an `args` or `meta`
//! over `hopper_core::LISTED_VALUE_BYTES` is left out, its size said), a reply is cut
//! before it would pass the server's `max_frame` and says where to go on (`next_before`),
//! the Rust remote backend pages on to the jobs asked for, and the `group` and `meta`
//! filters reach the server.

use std::time::Duration;

use crate::common::*;
use ciborium::Value;
use hopper::testing::TestDatabase;
use hopper::{Client, JobId, JobListParams, NewJob};
use serde_json::json;

/// The frame size of the test's server: 30 jobs of 4 KiB arguments need two frames.
const MAX_FRAME: usize = 64 * 1024;

/// Sends `list_jobs` with `filter` entries and answers the reply's frame size and reply.
async fn list_jobs(peer: &mut RawPeer, req: i64, filter: Vec<(&str, Value)>) -> (usize, Value) {
    peer.send(&map(vec![
        ("type", text("list_jobs")),
        ("req", int(req)),
        ("filter", map(filter)),
    ]))
    .await;
    let frame = peer.try_recv_bytes().await.expect("a reply within 10 s");
    let reply: Value = ciborium::from_reader(&frame[..]).expect("CBOR");
    assert_eq!(text_of(&reply, "type"), "jobs", "{reply:?}");
    (frame.len(), reply)
}

/// The jobs of a `jobs` reply.
fn jobs_of(reply: &Value) -> Vec<Value> {
    field(reply, "jobs")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_of_large_jobs_stays_under_max_frame_and_pages_on() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let mut config = config(&db, Duration::from_secs(5)).await;
    config.max_frame = MAX_FRAME;
    let server = start(config).await;
    let direct = Client::new(db.backend());
    // 30 jobs whose 4,000-byte arguments are listed, then 10 of 1 MB, which are not.
    let mut ids: Vec<JobId> = Vec::new();
    for n in 0..40 {
        let size = if n < 30 { 4_000 } else { 1_000_000 };
        let args = json!([String::from("x").repeat(size - 4)]);
        ids.push(direct.insert(NewJob::new("large", args)).await?);
    }
    ids.reverse(); // newest first

    let mut peer = RawPeer::connect(server.endpoint()).await;
    let welcome = peer.hello("client", TOKEN, vec![]).await;
    assert_eq!(field(&welcome, "max_frame"), Some(&int(MAX_FRAME as i64)));
    let mut listed = Vec::new();
    let mut pages = 0;
    let mut filter = vec![("kind", text("large")), ("limit", int(100))];
    loop {
        pages += 1;
        assert!(pages <= 10, "paging does not end");
        let (bytes, reply) = list_jobs(&mut peer, pages, filter.clone()).await;
        assert!(
            bytes <= MAX_FRAME,
            "a reply of {bytes} bytes, over {MAX_FRAME}"
        );
        let jobs = jobs_of(&reply);
        assert!(!jobs.is_empty(), "{reply:?}");
        for job in &jobs {
            let id: JobId = text_of(job, "id").parse()?;
            let large = ids[..10].contains(&id);
            assert_eq!(field(job, "args") == Some(&Value::Null), large, "{id}");
            let size = field(job, "args_bytes").cloned();
            assert_eq!(size, large.then(|| int(1_000_000)), "{id}");
            listed.push(id);
        }
        match field(&reply, "next_before") {
            Some(Value::Text(next)) => {
                assert_eq!(next, &listed[listed.len() - 1].to_string());
                filter = vec![
                    ("kind", text("large")),
                    ("limit", int(100 - listed.len() as i64)),
                    ("before", text(next)),
                ];
            }
            None | Some(Value::Null) => break,
            Some(other) => panic!("next_before {other:?}"),
        }
    }
    assert!(pages >= 2, "30 jobs of 4 KB fit in no frame of 64 KiB");
    assert_eq!(listed, ids);

    // The Rust remote backend pages on by itself to the jobs asked for.
    let remote = Client::new(hopper::connect(&url(server.endpoint()), Default::default()).await?);
    let params = JobListParams {
        kind: Some("large".into()),
        limit: 35,
        ..JobListParams::default()
    };
    let jobs = remote.jobs(&params).await?;
    assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), ids[..35]);
    assert_eq!(jobs[0].args_bytes, Some(1_000_000));
    assert_eq!(jobs[20].args_bytes, None);
    // Reading one job gives it whole.
    let whole = remote.job(ids[0]).await?.expect("the job");
    assert_eq!(whole.args, json!([String::from("x").repeat(1_000_000 - 4)]));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_listing_filters_by_group_and_meta() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let server = start(config(&db, Duration::from_secs(5)).await).await;
    let direct = Client::new(db.backend());
    let job = |group: &str, region: &str| {
        NewJob::new("tenant", json!({}))
            .with_group(group)
            .with_meta_entry("region", region)
    };
    let a_eu = direct.insert(job("a", "eu")).await?;
    let a_us = direct.insert(job("a", "us")).await?;
    let b_eu = direct.insert(job("b", "eu")).await?;
    let remote = Client::new(hopper::connect(&url(server.endpoint()), Default::default()).await?);
    let listed = |group: Option<&str>, meta: Option<serde_json::Value>| {
        let params = JobListParams {
            kind: Some("tenant".into()),
            group: group.map(str::to_owned),
            meta,
            limit: 10,
            ..JobListParams::default()
        };
        let remote = &remote;
        async move {
            let jobs = remote.jobs(&params).await?;
            anyhow::Ok(jobs.iter().map(|j| j.id).collect::<Vec<_>>())
        }
    };
    assert_eq!(listed(Some("a"), None).await?, vec![a_us, a_eu]);
    assert_eq!(
        listed(None, Some(json!({"region": "eu"}))).await?,
        vec![b_eu, a_eu]
    );
    assert_eq!(
        listed(Some("b"), Some(json!({"region": "eu"}))).await?,
        vec![b_eu]
    );
    // A bad filter is refused by the server, naming it.
    let bad = remote
        .jobs(&JobListParams {
            meta: Some(json!({"nested": {"no": 1}})),
            limit: 10,
            ..JobListParams::default()
        })
        .await;
    assert!(
        matches!(bad, Err(hopper::Error::InvalidInput(_))),
        "{bad:?}"
    );
    Ok(())
}
