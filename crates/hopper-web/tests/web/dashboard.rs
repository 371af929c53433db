//! The dashboard's files, nesting under a prefix, and the OpenAPI document.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::{Value, json};
use tower::ServiceExt;

use hopper_web::{AuthConfig, WebState};

use crate::common::{ADMIN, READ, Web, code};

#[tokio::test]
async fn dashboard_files_are_served_with_safe_headers() -> anyhow::Result<()> {
    let web = Web::new().await?;
    for (uri, content_type, needle) in [
        ("/", "text/html; charset=utf-8", "id=\"app\""),
        (
            "/assets/app.js",
            "text/javascript; charset=utf-8",
            "api/v1/",
        ),
        ("/assets/app.css", "text/css; charset=utf-8", "body"),
        ("/assets/favicon.svg", "image/svg+xml", "<svg"),
    ] {
        let answer = web.call(Method::GET, uri, None, None).await?;
        assert_eq!(answer.status, StatusCode::OK, "{uri}");
        assert_eq!(answer.header(header::CONTENT_TYPE), content_type, "{uri}");
        assert!(answer.text.contains(needle), "{uri} lacks {needle:?}");
        assert!(
            answer
                .header(header::CONTENT_SECURITY_POLICY)
                .contains("default-src 'self'")
        );
        assert_eq!(answer.header(header::X_CONTENT_TYPE_OPTIONS), "nosniff");
    }
    Ok(())
}

/// Every response, data, error or file, forbids sniffing and framing; what the API
/// answers (jobs' arguments, metadata, errors, metrics) is never stored by a browser's
/// cache, where it would outlive the tab that holds the token, while the dashboard's files
/// may be (revalidated at every load).
#[tokio::test]
async fn every_response_forbids_framing_and_api_answers_are_not_stored() -> anyhow::Result<()> {
    let web = Web::new().await?;
    web.enqueue(json!({"kind": "k", "args": {"card": "4111 1111 1111 1111"}}))
        .await?;
    let cases = [
        (Method::GET, "/api/v1/jobs", Some(ADMIN), "no-store"),
        (Method::GET, "/api/v1/queues", Some(READ), "no-store"),
        (Method::GET, "/api/v1/stats", Some(READ), "no-store"),
        (Method::GET, "/api/v1/jobs", None, "no-store"),
        (Method::GET, "/api/v1/nothing", Some(ADMIN), "no-store"),
        (
            Method::POST,
            "/api/v1/queues/q/pause",
            Some(READ),
            "no-store",
        ),
        (Method::GET, "/metrics", Some(READ), "no-store"),
        (Method::GET, "/health", None, "no-store"),
        (Method::GET, "/api/v1/openapi.json", None, "no-store"),
        (Method::GET, "/", None, "no-cache"),
        (Method::GET, "/assets/app.js", None, "no-cache"),
    ];
    for (method, uri, token, cache) in cases {
        let answer = web.call(method.clone(), uri, token, None).await?;
        assert_eq!(
            answer.header(header::CACHE_CONTROL),
            cache,
            "{method} {uri}"
        );
        assert_eq!(
            answer.header(header::X_CONTENT_TYPE_OPTIONS),
            "nosniff",
            "{uri}"
        );
        assert_eq!(answer.header(header::X_FRAME_OPTIONS), "DENY", "{uri}");
        let policy = answer.header(header::CONTENT_SECURITY_POLICY);
        assert!(policy.contains("frame-ancestors 'none'"), "{uri}: {policy}");
    }
    Ok(())
}

#[tokio::test]
async fn nested_under_a_prefix() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let app = axum::Router::new().nest("/ops/hopper", web.router.clone());
    let get = |uri: &str, token: Option<&str>| {
        let mut request = Request::builder().uri(uri);
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        request.body(Body::empty())
    };
    let response = app.clone().oneshot(get("/ops/hopper", None)?).await?;
    assert_eq!(response.status(), StatusCode::OK);
    let page = axum::body::to_bytes(response.into_body(), usize::MAX).await?;
    let page = String::from_utf8_lossy(&page);
    assert!(page.contains("src=\"/ops/hopper/assets/app.js\""), "{page}");
    assert!(
        page.contains("href=\"/ops/hopper/assets/app.css\""),
        "{page}"
    );
    let response = app
        .clone()
        .oneshot(get("/ops/hopper/assets/app.js", None)?)
        .await?;
    assert_eq!(response.status(), StatusCode::OK);
    let response = app
        .clone()
        .oneshot(get("/ops/hopper/api/v1/queues", Some(ADMIN))?)
        .await?;
    assert_eq!(response.status(), StatusCode::OK);
    let response = app.oneshot(get("/ops/hopper/api/v1/queues", None)?).await?;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    Ok(())
}

/// Every route the router serves, as `(method, OpenAPI path)`.
const ROUTES: &[(&str, &str)] = &[
    ("get", "/api/v1/openapi.json"),
    ("get", "/api/v1/whoami"),
    ("get", "/api/v1/jobs"),
    ("post", "/api/v1/jobs"),
    ("post", "/api/v1/jobs/batch"),
    ("post", "/api/v1/jobs/retry-failed"),
    ("get", "/api/v1/jobs/{id}"),
    ("delete", "/api/v1/jobs/{id}"),
    ("post", "/api/v1/jobs/{id}/retry"),
    ("post", "/api/v1/jobs/{id}/cancel"),
    ("get", "/api/v1/queues"),
    ("post", "/api/v1/queues/{queue}/pause"),
    ("post", "/api/v1/queues/{queue}/resume"),
    ("patch", "/api/v1/queues/{queue}/limits"),
    ("get", "/api/v1/stats"),
    ("get", "/api/v1/nodes"),
    ("get", "/metrics"),
    ("get", "/health"),
];

/// The limits the document states for a new job are the server's: durations at most
/// `MAX_DURATION_MS` (10 years), metadata at most `MAX_META_BYTES` as JSON (which JSON
/// Schema cannot count, so no `maxProperties` stands in for it), a unique policy only with
/// a unique key.
#[tokio::test]
async fn openapi_limits_of_a_new_job_are_the_servers() -> anyhow::Result<()> {
    let doc: Value = serde_json::from_str(include_str!("../../openapi.json"))?;
    let job = &doc["components"]["schemas"]["NewJob"];
    let max = hopper::limits::MAX_DURATION_MS;
    for field in ["delay_ms", "unique_window_ms"] {
        let property = &job["properties"][field];
        assert_eq!(property["maximum"], json!(max), "{field}");
        let text = property["description"].as_str().unwrap_or_default();
        assert!(text.contains("10 years"), "{field}: {text}");
    }
    let meta = &job["properties"]["meta"];
    assert!(meta.get("maxProperties").is_none(), "{meta}");
    let bytes = hopper::core::meta::MAX_META_BYTES.to_string();
    assert!(
        meta["description"]
            .as_str()
            .is_some_and(|d| d.contains(&bytes)),
        "{meta}"
    );
    assert_eq!(
        job["dependentRequired"]["unique_policy"],
        json!(["unique_key"])
    );
    // The server keeps to them: one past each is refused, the limit itself accepted.
    let web = Web::new().await?;
    for (field, value, status) in [
        ("delay_ms", max + 1, StatusCode::BAD_REQUEST),
        ("delay_ms", max, StatusCode::CREATED),
    ] {
        let body = json!({"kind": "k", field: value});
        let answer = web
            .call(Method::POST, "/api/v1/jobs", Some(ADMIN), Some(body))
            .await?;
        assert_eq!(answer.status, status, "{field} {value}: {answer:?}");
    }
    let window =
        |ms: u64| json!({"kind": "k", "unique_key": format!("w{ms}"), "unique_window_ms": ms});
    let answer = web
        .call(
            Method::POST,
            "/api/v1/jobs",
            Some(ADMIN),
            Some(window(max + 1)),
        )
        .await?;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
    let answer = web
        .call(Method::POST, "/api/v1/jobs", Some(ADMIN), Some(window(max)))
        .await?;
    assert_eq!(answer.status, StatusCode::CREATED, "{answer:?}");
    Ok(())
}

#[tokio::test]
async fn openapi_document_matches_the_router() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let answer = web
        .call(Method::GET, "/api/v1/openapi.json", None, None)
        .await?;
    assert_eq!(answer.status, StatusCode::OK);
    let doc = &answer.json;
    assert_eq!(doc["openapi"], "3.1.0");
    let paths = doc["paths"].as_object().cloned().unwrap_or_default();

    // Every route is documented…
    for (method, path) in ROUTES {
        assert!(
            paths.get(*path).and_then(|p| p.get(*method)).is_some(),
            "{method} {path} undocumented"
        );
    }
    // …and everything documented is routed.
    let id = uuid::Uuid::now_v7().to_string();
    let mut documented = 0;
    for (path, item) in &paths {
        for method in item
            .as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_else(Vec::new)
        {
            if !["get", "post", "delete", "put", "patch"].contains(&method.as_str()) {
                continue;
            }
            documented += 1;
            assert!(
                ROUTES.contains(&(method.as_str(), path.as_str())),
                "{method} {path} not in ROUTES"
            );
            let uri = path.replace("{id}", &id).replace("{queue}", "default");
            let m = Method::from_bytes(method.to_uppercase().as_bytes())?;
            let body = (m == Method::POST).then(|| json!({"jobs": [{"kind": "k"}], "kind": "k"}));
            let answer = web.call(m, &uri, Some(ADMIN), body).await?;
            assert!(
                !(code(&answer) == "not_found"
                    && answer.json["error"]["message"]
                        .as_str()
                        .unwrap_or("")
                        .starts_with("no route"))
                    && answer.status != StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}: {answer:?}"
            );
        }
    }
    assert_eq!(documented, ROUTES.len());

    // Every `$ref` resolves.
    let text = serde_json::to_string(doc)?;
    for piece in text.split("\"$ref\":\"#/").skip(1) {
        let pointer = format!("/{}", piece.split('"').next().unwrap_or(""));
        assert!(doc.pointer(&pointer).is_some(), "dangling $ref {pointer}");
    }
    let _: &Value = doc;
    Ok(())
}

/// A request body that never arrives: its one frame is pending for ever.
struct NeverEnds;

impl axum::body::HttpBody for NeverEnds {
    type Data = axum::body::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        std::task::Poll::Pending
    }
}

/// Every error code the server answers is one the document's `Error` schema lists, so a
/// client that validates answers against the document accepts each refusal; and every
/// operation that takes a body documents the `408` of a body that does not arrive in time.
#[tokio::test]
async fn openapi_error_codes_are_the_servers() -> anyhow::Result<()> {
    let doc: Value = serde_json::from_str(include_str!("../../openapi.json"))?;
    let listed: Vec<&str> =
        doc["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"]["enum"]
            .as_array()
            .map(|codes| codes.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
    let web = Web::new().await?;
    let state = WebState::new(web.backend(), AuthConfig::tokens([ADMIN], [READ])?)
        .with_body_timeout(std::time::Duration::from_millis(50));
    let router = hopper_web::router(state);
    let request = |method: Method, uri: &str| {
        Request::builder()
            .method(method)
            .uri(uri)
            .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"))
    };
    let json = || header::HeaderValue::from_static("application/json");
    let cases: Vec<(&str, Request<Body>)> = vec![
        (
            "host_not_allowed",
            request(Method::GET, "/api/v1/queues")
                .header(header::HOST, "attacker.example")
                .body(Body::empty())?,
        ),
        (
            "cross_origin",
            request(Method::POST, "/api/v1/queues/q/pause")
                .header(header::ORIGIN, "https://attacker.example")
                .body(Body::empty())?,
        ),
        (
            "unsupported_media_type",
            request(Method::POST, "/api/v1/jobs")
                .header(header::CONTENT_TYPE, "text/plain")
                .body(Body::from("{}"))?,
        ),
        (
            "request_timeout",
            request(Method::POST, "/api/v1/jobs")
                .header(header::CONTENT_TYPE, json())
                .body(Body::new(NeverEnds))?,
        ),
        (
            "payload_too_large",
            request(Method::POST, "/api/v1/jobs")
                .header(header::CONTENT_TYPE, json())
                .header(header::CONTENT_LENGTH, "999999999")
                .body(Body::empty())?,
        ),
        (
            "method_not_allowed",
            request(Method::PUT, "/api/v1/queues").body(Body::empty())?,
        ),
        (
            "unauthorized",
            Request::get("/api/v1/queues").body(Body::empty())?,
        ),
        (
            "forbidden",
            Request::post("/api/v1/queues/q/pause")
                .header(header::AUTHORIZATION, format!("Bearer {READ}"))
                .body(Body::empty())?,
        ),
        (
            "not_found",
            request(Method::GET, "/api/v1/nothing").body(Body::empty())?,
        ),
        (
            "invalid_input",
            request(Method::GET, "/api/v1/jobs?limit=0").body(Body::empty())?,
        ),
    ];
    for (expected, request) in cases {
        let response = router.clone().oneshot(request).await?;
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await?;
        let body: Value = serde_json::from_slice(&bytes)?;
        let answered = body["error"]["code"].as_str().unwrap_or_default();
        assert_eq!(answered, expected, "{body}");
        assert!(
            listed.contains(&answered),
            "{answered} is not in the document's error codes {listed:?}"
        );
    }
    // Every operation with a body says what a body too slow to arrive gets.
    let paths = doc["paths"].as_object().cloned().unwrap_or_default();
    for (path, item) in &paths {
        for (method, operation) in item.as_object().cloned().unwrap_or_default() {
            if operation.get("requestBody").is_some() {
                assert!(
                    operation["responses"].get("408").is_some(),
                    "{method} {path} documents no 408"
                );
            }
        }
    }
    Ok(())
}
