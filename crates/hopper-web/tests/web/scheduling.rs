//! Scheduling through the API: queue limits (`PATCH /api/v1/queues/{queue}/limits`), and
//! the group and unique key of a job in its JSON and the `group` filter.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::{READ, Web, code, message};

async fn patch(web: &Web, uri: &str, body: Value) -> anyhow::Result<crate::common::Answer> {
    web.call(Method::PATCH, uri, Some(crate::common::ADMIN), Some(body))
        .await
}

#[tokio::test]
async fn limits_are_set_shown_and_removed() -> anyhow::Result<()> {
    let web = Web::new().await?;
    web.enqueue(json!({"kind": "k", "queue": "mail"})).await?;
    let set = patch(
        &web,
        "/api/v1/queues/mail/limits",
        json!({"max_running": 5, "max_running_per_group": 2, "rate": "100/s"}),
    )
    .await?;
    assert_eq!(set.status, StatusCode::OK, "{set:?}");
    assert_eq!(set.json["max_running"], 5);
    assert_eq!(set.json["max_running_per_group"], 2);
    assert_eq!(
        set.json["rate"],
        json!({"jobs": 100, "per": 1000, "burst": 10})
    );

    // The queue list shows them.
    let queues = web.get("/api/v1/queues").await?.json["queues"].clone();
    assert_eq!(queues[0]["queue"], "mail");
    assert_eq!(queues[0]["settings"]["max_running"], 5);
    assert_eq!(queues[0]["settings"]["rate"]["jobs"], 100);

    // Absent keeps a limit, null removes it; the object form sets the burst.
    let changed = patch(
        &web,
        "/api/v1/queues/mail/limits",
        json!({"max_running_per_group": null, "rate": {"jobs": 20, "per": 60000, "burst": 4}}),
    )
    .await?;
    assert_eq!(changed.status, StatusCode::OK, "{changed:?}");
    assert_eq!(changed.json["max_running"], 5);
    assert!(changed.json["max_running_per_group"].is_null());
    assert_eq!(
        changed.json["rate"],
        json!({"jobs": 20, "per": 60000, "burst": 4})
    );
    let settings = web.backend().queue_list().await?;
    let mail = settings.iter().find(|s| s.queue == "mail");
    assert_eq!(mail.and_then(|s| s.max_running), Some(5));
    assert_eq!(mail.and_then(|s| s.rate).map(|r| r.burst), Some(4));

    // A queue with no job yet can be limited ahead of time.
    let ahead = patch(
        &web,
        "/api/v1/queues/later/limits",
        json!({"max_running": 1}),
    )
    .await?;
    assert_eq!(ahead.status, StatusCode::OK, "{ahead:?}");
    Ok(())
}

#[tokio::test]
async fn bad_limits_are_refused_and_change_nothing() -> anyhow::Result<()> {
    let web = Web::new().await?;
    patch(&web, "/api/v1/queues/q/limits", json!({"max_running": 3})).await?;
    for body in [
        json!({}),
        json!({"max_running": 0}),
        json!({"max_running": -1}),
        json!({"max_running": 1.5}),
        json!({"max_running": 2_147_483_648_u64}),
        json!({"rate": "lots"}),
        json!({"rate": {"jobs": 1}}),
        json!({"rate": {"jobs": 1, "per": 0}}),
        json!({"rate": true}),
        json!({"concurrency": 4}),
        json!([1, 2]),
    ] {
        let answer = patch(&web, "/api/v1/queues/q/limits", body.clone()).await?;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{body}: {answer:?}");
        assert_eq!(code(&answer), "invalid_input");
        assert!(!message(&answer).is_empty());
    }
    let bad_name = patch(
        &web,
        "/api/v1/queues/a%20b/limits",
        json!({"max_running": 1}),
    )
    .await?;
    assert_eq!(bad_name.status, StatusCode::BAD_REQUEST, "{bad_name:?}");
    let settings = web.backend().queue_list().await?;
    assert_eq!(settings.len(), 1, "only q has settings: {settings:?}");
    assert_eq!(settings[0].max_running, Some(3), "unchanged");

    // Readers may not change limits.
    let reader = web
        .call(
            Method::PATCH,
            "/api/v1/queues/q/limits",
            Some(READ),
            Some(json!({"max_running": 9})),
        )
        .await?;
    assert_eq!(reader.status, StatusCode::FORBIDDEN, "{reader:?}");
    Ok(())
}

#[tokio::test]
async fn jobs_show_their_group_and_unique_key_and_filter_by_group() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let keyed = web
        .enqueue(json!({"kind": "sync", "queue": "t", "group": "tenant-7", "unique_key": "sync:7"}))
        .await?;
    let other = web
        .enqueue(json!({"kind": "sync", "queue": "t", "group": "tenant-8"}))
        .await?;
    let plain = web.enqueue(json!({"kind": "sync", "queue": "t"})).await?;

    let job = web.get(&format!("/api/v1/jobs/{keyed}")).await?.json;
    assert_eq!(job["group"], "tenant-7");
    assert_eq!(job["unique_key"], "sync:7");
    let job = web.get(&format!("/api/v1/jobs/{plain}")).await?.json;
    assert!(
        job["group"].is_null() && job["unique_key"].is_null(),
        "{job}"
    );

    let page = web.get("/api/v1/jobs?group=tenant-8").await?;
    assert_eq!(page.status, StatusCode::OK, "{page:?}");
    let ids: Vec<&str> = page.json["jobs"]
        .as_array()
        .map(|jobs| jobs.iter().filter_map(|j| j["id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, vec![other.to_string()]);
    // With a time range (the search path) too.
    let page = web
        .get("/api/v1/jobs?group=tenant-7&since=2000-01-01T00:00:00Z")
        .await?;
    assert_eq!(page.json["jobs"][0]["id"], keyed.to_string());
    assert_eq!(page.json["jobs"].as_array().map(Vec::len), Some(1));

    let bad = web.get("/api/v1/jobs?group=a%20b").await?;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{bad:?}");
    assert!(message(&bad).contains("group"), "{bad:?}");
    Ok(())
}
