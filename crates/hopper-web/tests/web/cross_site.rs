//! DNS rebinding and cross-site requests: a foreign `Host` is refused in every
//! authentication mode, and so are mutations from another origin or with a body that is
//! not JSON. (That refusals reach the log cut short and rate-limited is checked in
//! `security.rs`, the one test of this binary that captures the log.)

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use hopper_web::{AllowedHosts, AuthConfig};
use serde_json::json;

use crate::auth::mutations;
use crate::common::{ADMIN, Web, code};

/// A request as a browser would send it: with `Host`, and `Origin` when given.
fn browser(
    method: Method,
    uri: &str,
    host: &str,
    origin: Option<&str>,
    body: Option<(&str, String)>,
) -> anyhow::Result<Request<Body>> {
    let mut request = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::HOST, host);
    if let Some(origin) = origin {
        request = request.header(header::ORIGIN, origin);
    }
    Ok(match body {
        Some((content_type, body)) => request
            .header(header::CONTENT_TYPE, content_type)
            .header(header::CONTENT_LENGTH, body.len())
            .body(Body::from(body))?,
        None => request.body(Body::empty())?,
    })
}

async fn paused(web: &Web, queue: &str) -> anyhow::Result<bool> {
    let settings = hopper::Client::new(web.backend()).queues().await?;
    Ok(settings.iter().any(|s| s.queue == queue && s.paused))
}

#[tokio::test]
async fn a_foreign_host_is_refused_in_every_auth_mode() -> anyhow::Result<()> {
    for auth in [
        AuthConfig::open(),
        AuthConfig::tokens([ADMIN], [] as [&str; 0])?,
    ] {
        let open = auth.is_open();
        let web = Web::with_auth(auth).await?;
        let bearer = format!("Bearer {ADMIN}");
        let get = |host: &str, path: &str| {
            Request::builder()
                .uri(path)
                .header(header::HOST, host)
                .header(header::AUTHORIZATION, bearer.as_str())
                .body(Body::empty())
        };
        for host in [
            "attacker.example:7011",
            "localhost.attacker.example",
            "127.0.0.2",
        ] {
            for path in ["/api/v1/jobs", "/", "/metrics", "/api/v1/openapi.json"] {
                let answer = web.send(get(host, path)?).await?;
                assert_eq!(answer.status, StatusCode::FORBIDDEN, "{open} {host}{path}");
                assert_eq!(code(&answer), "host_not_allowed", "{answer:?}");
            }
        }
        // A rebinding page's own mutation: refused, nothing written.
        let request = browser(
            Method::POST,
            "/api/v1/queues/q/pause",
            "attacker.example:7011",
            Some("http://attacker.example:7011"),
            None,
        )?;
        assert_eq!(web.send(request).await?.status, StatusCode::FORBIDDEN);
        assert!(!paused(&web, "q").await?);
        for host in [
            "127.0.0.1:7011",
            "localhost:7011",
            "[::1]:7011",
            "LOCALHOST",
        ] {
            let answer = web.send(get(host, "/api/v1/jobs")?).await?;
            assert_eq!(answer.status, StatusCode::OK, "{host}: {answer:?}");
        }
    }
    Ok(())
}

#[tokio::test]
async fn configured_names_and_the_bound_address_are_accepted() -> anyhow::Result<()> {
    let db = hopper::testing::TestDatabase::new().await?;
    let hosts =
        AllowedHosts::for_address("10.1.2.3:7011".parse()?).with_name("hopper.example.com")?;
    let state =
        hopper_web::WebState::new(db.backend(), AuthConfig::open()).with_allowed_hosts(hosts);
    let web = Web {
        db,
        router: hopper_web::router(state),
    };
    for (host, status) in [
        ("hopper.example.com", StatusCode::OK),
        ("HOPPER.example.com:443", StatusCode::OK),
        ("10.1.2.3:7011", StatusCode::OK),
        ("10.1.2.4:7011", StatusCode::FORBIDDEN),
        ("other.example.com", StatusCode::FORBIDDEN),
    ] {
        let request = browser(Method::GET, "/api/v1/stats", host, None, None)?;
        assert_eq!(web.send(request).await?.status, status, "{host}");
    }
    // Behind a proxy: the browser's origin is the configured name, whatever the port.
    let request = browser(
        Method::POST,
        "/api/v1/queues/q/pause",
        "10.1.2.3:7011",
        Some("https://hopper.example.com"),
        None,
    )?;
    assert_eq!(web.send(request).await?.status, StatusCode::OK);
    assert!(paused(&web, "q").await?);
    Ok(())
}

#[tokio::test]
async fn cross_origin_mutations_are_refused_even_open() -> anyhow::Result<()> {
    let web = Web::with_auth(AuthConfig::open()).await?;
    let id = web.enqueue(json!({"kind": "k"})).await?;
    let host = "127.0.0.1:7011";
    for (method, path, _) in mutations(&id.to_string()) {
        for origin in [
            "http://attacker.example",
            "http://127.0.0.1:8080",
            "http://localhost:7011",
            "null",
        ] {
            // The HTML form of the reproduction: form-encoded, no preflight.
            let body = Some(("application/x-www-form-urlencoded", "a=b".to_owned()));
            let answer = web
                .send(browser(method.clone(), &path, host, Some(origin), body)?)
                .await?;
            assert_eq!(
                answer.status,
                StatusCode::FORBIDDEN,
                "{method} {path} {origin}"
            );
            assert_eq!(code(&answer), "cross_origin", "{answer:?}");
        }
        let mut request = browser(method.clone(), &path, host, None, None)?;
        request
            .headers_mut()
            .insert("sec-fetch-site", "cross-site".parse()?);
        let answer = web.send(request).await?;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{method} {path}");
    }
    assert!(!paused(&web, "default").await?);
    let job = web.get(&format!("/api/v1/jobs/{id}")).await?;
    assert_eq!(job.json["state"], "available", "{job:?}");
    assert_eq!(web.job_count().await?, 1);

    // The dashboard's own requests (same origin) and curl's (no Origin) go through.
    let same = browser(
        Method::POST,
        "/api/v1/queues/default/pause",
        host,
        Some("http://127.0.0.1:7011"),
        None,
    )?;
    assert_eq!(web.send(same).await?.status, StatusCode::OK);
    assert!(paused(&web, "default").await?);
    let mut curl = browser(
        Method::POST,
        &format!("/api/v1/jobs/{id}/cancel"),
        host,
        None,
        None,
    )?;
    curl.headers_mut()
        .insert("sec-fetch-site", "same-origin".parse()?);
    assert_eq!(web.send(curl).await?.status, StatusCode::OK);
    Ok(())
}

#[tokio::test]
async fn mutation_bodies_must_be_json() -> anyhow::Result<()> {
    let web = Web::with_auth(AuthConfig::open()).await?;
    let body = r#"{"kind": "k"}"#.to_owned();
    for content_type in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        for path in ["/api/v1/jobs", "/api/v1/queues/q/pause"] {
            let request = browser(
                Method::POST,
                path,
                "127.0.0.1",
                None,
                Some((content_type, body.clone())),
            )?;
            let answer = web.send(request).await?;
            assert_eq!(
                answer.status,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "{content_type} {path}"
            );
            assert_eq!(code(&answer), "unsupported_media_type");
        }
    }
    // A body without a content type is refused too.
    let request = Request::builder()
        .method(Method::POST)
        .uri("/api/v1/queues/q/pause")
        .header(header::CONTENT_LENGTH, 3)
        .body(Body::from("a=b"))?;
    assert_eq!(
        web.send(request).await?.status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    assert_eq!(web.job_count().await?, 0);
    assert!(!paused(&web, "q").await?);
    let json = browser(
        Method::POST,
        "/api/v1/jobs",
        "127.0.0.1",
        None,
        Some(("application/json; charset=utf-8", body)),
    )?;
    assert_eq!(web.send(json).await?.status, StatusCode::CREATED);
    Ok(())
}
