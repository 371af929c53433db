//! Security of the HTTP API: hostile strings in every filter, the cursor and the enqueue
//! fields are refused or stored verbatim, and oversized or deeply nested bodies get clear
//! errors. (That refused requests are logged, and tokens never, is tested in a binary of
//! its own: `tests/refusal_logs.rs`.)

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::json;

use crate::common::{ADMIN, Web, code, message};

/// Strings that would change a query if it were built by pasting text.
const HOSTILE: [&str; 6] = [
    "default' OR '1'='1",
    "'; DROP TABLE jobs; --",
    "x\"; DELETE FROM jobs; --",
    "k) OR (1=1",
    "%' OR 1=1 --",
    "\\'; SELECT pg_sleep(10); --",
];

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[tokio::test]
async fn hostile_strings_in_filters_cursor_and_fields_are_harmless() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let id = web.enqueue(json!({"kind": "k", "queue": "q1"})).await?;
    for s in HOSTILE {
        for filter in [
            "queue", "kind", "group", "state", "before", "since", "until", "limit",
        ] {
            let answer = web
                .get(&format!("/api/v1/jobs?{filter}={}", encode(s)))
                .await?;
            match answer.status {
                StatusCode::BAD_REQUEST => {
                    assert!(!message(&answer).is_empty(), "{filter}: a clear error")
                }
                StatusCode::OK => assert_eq!(
                    answer.json["jobs"].as_array().map(Vec::len),
                    Some(0),
                    "{filter}={s:?} matched something: {answer:?}"
                ),
                other => panic!("{filter}={s:?}: {other} {answer:?}"),
            }
        }
        // As names: refused, with the field named.
        for field in ["queue", "kind", "group"] {
            let mut body = json!({"kind": "k"});
            body[field] = json!(s);
            let answer = web.post("/api/v1/jobs", body).await?;
            assert_eq!(
                answer.status,
                StatusCode::BAD_REQUEST,
                "{field}: {answer:?}"
            );
            assert!(message(&answer).contains(field), "{answer:?}");
        }
        // As a unique key, which may hold any printable text: stored verbatim.
        let stored = web
            .enqueue(json!({"kind": "k", "queue": "keys", "unique_key": s, "args": {"s": s}}))
            .await?;
        let job = web.get(&format!("/api/v1/jobs/{stored}")).await?;
        assert_eq!(job.json["unique_key"], json!(s), "{job:?}");
        assert_eq!(job.json["args"]["s"], json!(s));
        // In a path.
        let answer = web
            .post(&format!("/api/v1/queues/{}/pause", encode(s)), json!({}))
            .await?;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
        let answer = web.get(&format!("/api/v1/jobs/{}", encode(s))).await?;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
    }
    // Everything is still there and works.
    assert_eq!(web.job_count().await?, 1 + HOSTILE.len() as i64);
    let job = web.get(&format!("/api/v1/jobs/{id}")).await?;
    assert_eq!(job.json["state"], "available");
    let listed = web.get("/api/v1/jobs?queue=q1").await?;
    assert_eq!(listed.json["jobs"].as_array().map(Vec::len), Some(1));
    Ok(())
}

#[tokio::test]
async fn deeply_nested_and_oversized_bodies_get_clear_errors() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let post_raw = |body: Vec<u8>| {
        Request::builder()
            .method(Method::POST)
            .uri("/api/v1/jobs")
            .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body))
    };
    // 100,000 levels of `[`: refused by the JSON parser's depth limit, no stack overflow.
    let mut deep = br#"{"kind": "k", "args": "#.to_vec();
    deep.extend(std::iter::repeat_n(b'[', 100_000));
    deep.extend(std::iter::repeat_n(b']', 100_000));
    deep.push(b'}');
    let answer = web.send(post_raw(deep)?).await?;
    assert!(answer.status.is_client_error(), "{answer:?}");
    assert!(answer.text.contains("recursion limit"), "{}", answer.text);

    // Arguments over 1 MiB: refused by validation, naming the limit.
    let fat = json!({"kind": "k", "args": {"blob": "x".repeat(1 << 20)}});
    let answer = web.post("/api/v1/jobs", fat).await?;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.text);
    assert!(message(&answer).contains("over the limit"), "{answer:?}");

    // A body over the server's body limit: 413, unread.
    let mut huge = br#"{"kind": "k", "args": {"blob": ""#.to_vec();
    huge.resize(hopper_web::DEFAULT_MAX_BODY_BYTES + 1024, b'y');
    huge.extend(br#""}}"#);
    let answer = web.send(post_raw(huge)?).await?;
    assert_eq!(
        answer.status,
        StatusCode::PAYLOAD_TOO_LARGE,
        "{}",
        answer.text
    );

    // Nothing was written, and the API still serves.
    assert_eq!(web.job_count().await?, 0);
    web.enqueue(json!({"kind": "k"})).await?;
    let answer = web.get("/api/v1/jobs/not-a-uuid").await?;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", code(&answer));
    Ok(())
}
