//! Job metadata through the API: submitted in the body or from the `traceparent` header,
//! shown in job details and listings, searched by containment; hostile metadata refused.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::{Value, json};

use crate::common::{ADMIN, Web, code, message};

const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const TP2: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// `POST path` with `body` and extra headers, as the admin.
async fn post_with(
    web: &Web,
    path: &str,
    body: Value,
    headers: &[(&str, &str)],
) -> anyhow::Result<crate::common::Answer> {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"))
        .header(header::CONTENT_TYPE, "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    web.send(request.body(Body::from(serde_json::to_vec(&body)?))?)
        .await
}

#[tokio::test]
async fn meta_from_body_and_traceparent_header_is_shown_and_searchable() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let body = post_with(
        &web,
        "/api/v1/jobs",
        json!({"kind": "k", "meta": {"tenant": "acme", "traceparent": TP}}),
        &[("traceparent", TP2)],
    )
    .await?;
    assert_eq!(body.status, StatusCode::CREATED, "{body:?}");
    assert_eq!(
        body.json["meta"],
        json!({"tenant": "acme", "traceparent": TP}),
        "the body's traceparent wins over the header"
    );
    let header = post_with(
        &web,
        "/api/v1/jobs",
        json!({"kind": "k", "meta": {"tenant": "globex"}}),
        &[("traceparent", TP2), ("tracestate", "vendor=1")],
    )
    .await?;
    assert_eq!(
        header.json["meta"],
        json!({"tenant": "globex", "traceparent": TP2, "tracestate": "vendor=1"})
    );
    let ignored = post_with(
        &web,
        "/api/v1/jobs",
        json!({"kind": "k"}),
        &[("traceparent", "00-garbage"), ("tracestate", "x=1")],
    )
    .await?;
    assert_eq!(ignored.status, StatusCode::CREATED, "{ignored:?}");
    assert_eq!(
        ignored.json["meta"],
        json!({}),
        "a malformed traceparent header is ignored, as W3C says"
    );
    let batch = post_with(
        &web,
        "/api/v1/jobs/batch",
        json!({"jobs": [{"kind": "k", "meta": {"tenant": "acme"}}, {"kind": "k"}]}),
        &[("traceparent", TP2)],
    )
    .await?;
    assert_eq!(batch.status, StatusCode::CREATED, "{batch:?}");
    let batch_id = batch.json["ids"][0].as_str().unwrap_or_default().to_owned();
    let detail = web.get(&format!("/api/v1/jobs/{batch_id}")).await?;
    assert_eq!(
        detail.json["meta"],
        json!({"tenant": "acme", "traceparent": TP2})
    );

    let found = web
        .get("/api/v1/jobs?meta=%7B%22tenant%22%3A%22acme%22%7D")
        .await?;
    assert_eq!(found.status, StatusCode::OK, "{found:?}");
    let jobs = found.json["jobs"].as_array().cloned().unwrap_or_default();
    assert_eq!(jobs.len(), 2, "{found:?}");
    assert!(jobs.iter().all(|j| j["meta"]["tenant"] == "acme"));
    let all = web.get("/api/v1/jobs").await?;
    assert_eq!(all.json["jobs"].as_array().map(Vec::len), Some(5));
    Ok(())
}

#[tokio::test]
async fn hostile_meta_is_refused_and_writes_nothing() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let huge = "x".repeat(17_000);
    let cases = [
        (
            json!({"kind": "k", "meta": [1, 2]}),
            "meta must be a JSON object",
        ),
        (
            json!({"kind": "k", "meta": "tenant"}),
            "meta must be a JSON object",
        ),
        (
            json!({"kind": "k", "meta": {"blob": huge}}),
            "over the limit of 16384 bytes",
        ),
        (
            json!({"kind": "k", "meta": {"traceparent": "00-abc"}}),
            "is not a W3C traceparent",
        ),
        (
            json!({"kind": "k", "meta": {"traceparent": 12}}),
            "meta.traceparent must be a string",
        ),
        (json!({"kind": "k", "meta": {"k": "a\u{0}b"}}), "U+0000"),
    ];
    for (body, expected) in cases {
        let answer = web.post("/api/v1/jobs", body.clone()).await?;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{body}: {answer:?}");
        assert_eq!(code(&answer), "invalid_input");
        assert!(message(&answer).contains(expected), "{body}: {answer:?}");
    }
    let batch = web
        .post(
            "/api/v1/jobs/batch",
            json!({"jobs": [{"kind": "k"}, {"kind": "k", "meta": [1]}]}),
        )
        .await?;
    assert_eq!(batch.status, StatusCode::BAD_REQUEST, "{batch:?}");
    assert!(message(&batch).starts_with("jobs[1]: meta"), "{batch:?}");
    for filter in ["%5B%5D", "%7B", "%7B%22a%22%3A%7B%7D%7D"] {
        let answer = web.get(&format!("/api/v1/jobs?meta={filter}")).await?;
        assert_eq!(
            answer.status,
            StatusCode::BAD_REQUEST,
            "{filter}: {answer:?}"
        );
        assert!(message(&answer).contains("meta filter"), "{answer:?}");
    }
    assert_eq!(web.job_count().await?, 0);
    Ok(())
}

#[tokio::test]
async fn job_detail_shows_each_attempts_log() -> anyhow::Result<()> {
    use hopper::backend::{ClaimParams, Finish};
    use hopper::core::job_log::{JobLogAppend, LogLevel, LogLine};
    let web = Web::new().await?;
    let id = web.enqueue(json!({"kind": "k"})).await?;
    let backend = web.backend();
    let claimed = backend
        .job_claim(&ClaimParams {
            queue: "default".into(),
            node: uuid::Uuid::now_v7(),
            limit: 1,
            lease: std::time::Duration::from_secs(60),
            kinds: None,
        })
        .await?;
    let lease = claimed[0].lease;
    let store = backend
        .logs()
        .ok_or_else(|| anyhow::anyhow!("no log store"))?;
    store
        .job_log_append(&[JobLogAppend {
            lease,
            lines: vec![LogLine {
                at: chrono::Utc::now(),
                level: LogLevel::Warn,
                message: "<script>alert(1)</script>".into(),
                fields: serde_json::from_value(json!({"rows": 3}))?,
            }],
            dropped: 7,
        }])
        .await?;
    backend
        .job_finish_many(&[Finish {
            lease,
            outcome: crate::common::completed(),
        }])
        .await?;
    let detail = web.get(&format!("/api/v1/jobs/{id}")).await?;
    assert_eq!(detail.status, StatusCode::OK);
    let logs = &detail.json["logs"];
    assert_eq!(logs[0]["attempt"], 1);
    assert_eq!(logs[0]["dropped"], 7);
    assert_eq!(logs[0]["lines"][0]["level"], "warn");
    assert_eq!(logs[0]["lines"][0]["message"], "<script>alert(1)</script>");
    assert_eq!(logs[0]["lines"][0]["fields"]["rows"], 3);
    let listed = web.get("/api/v1/jobs").await?;
    assert!(
        listed.json["jobs"][0].get("logs").is_none(),
        "listings carry no logs"
    );
    Ok(())
}
