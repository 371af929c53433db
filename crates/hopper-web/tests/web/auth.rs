//! Authentication: no token → 401, read-only token on a mutation → 403, admin → ok.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use base64::Engine;
use serde_json::json;

use crate::common::{ADMIN, READ, Web, code};

/// Every mutating endpoint, with a body it accepts.
pub(crate) fn mutations(id: &str) -> Vec<(Method, String, Option<serde_json::Value>)> {
    vec![
        (
            Method::POST,
            "/api/v1/jobs".into(),
            Some(json!({"kind": "k"})),
        ),
        (
            Method::POST,
            "/api/v1/jobs/batch".into(),
            Some(json!({"jobs": [{"kind": "k"}]})),
        ),
        (Method::POST, format!("/api/v1/jobs/{id}/cancel"), None),
        (Method::POST, format!("/api/v1/jobs/{id}/retry"), None),
        (Method::DELETE, format!("/api/v1/jobs/{id}"), None),
        (
            Method::POST,
            "/api/v1/jobs/retry-failed".into(),
            Some(json!({})),
        ),
        (Method::POST, "/api/v1/queues/default/pause".into(), None),
        (Method::POST, "/api/v1/queues/default/resume".into(), None),
    ]
}

/// Every reading endpoint.
fn reads(id: &str) -> Vec<String> {
    vec![
        "/api/v1/jobs".into(),
        format!("/api/v1/jobs/{id}"),
        "/api/v1/queues".into(),
        "/api/v1/stats".into(),
        "/api/v1/whoami".into(),
        "/metrics".into(),
    ]
}

#[tokio::test]
async fn no_or_wrong_token_is_401_everywhere() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let id = web.enqueue(json!({"kind": "k"})).await?.to_string();
    for uri in reads(&id) {
        for token in [None, Some("not-a-valid-token-at-all")] {
            let answer = web.call(Method::GET, &uri, token, None).await?;
            assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "GET {uri}");
            assert_eq!(code(&answer), "unauthorized");
            assert!(answer.headers.contains_key(header::WWW_AUTHENTICATE));
        }
    }
    for (method, uri, body) in mutations(&id) {
        let answer = web.call(method.clone(), &uri, None, body).await?;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{method} {uri}");
    }
    assert_eq!(web.job_count().await?, 1, "nothing written");
    Ok(())
}

#[tokio::test]
async fn read_token_reads_but_cannot_change_anything() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let id = web.enqueue(json!({"kind": "k"})).await?.to_string();
    for uri in reads(&id) {
        let answer = web.call(Method::GET, &uri, Some(READ), None).await?;
        assert_eq!(answer.status, StatusCode::OK, "GET {uri}: {answer:?}");
    }
    let who = web
        .call(Method::GET, "/api/v1/whoami", Some(READ), None)
        .await?;
    assert_eq!(who.json["role"], "read");
    for (method, uri, body) in mutations(&id) {
        let answer = web.call(method.clone(), &uri, Some(READ), body).await?;
        assert_eq!(
            answer.status,
            StatusCode::FORBIDDEN,
            "{method} {uri}: {answer:?}"
        );
        assert_eq!(code(&answer), "forbidden");
    }
    assert_eq!(web.job_count().await?, 1, "nothing written");
    let job = web.get(&format!("/api/v1/jobs/{id}")).await?;
    assert_eq!(job.json["state"], "available", "not cancelled");
    Ok(())
}

#[tokio::test]
async fn admin_token_may_do_everything() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let who = web.get("/api/v1/whoami").await?;
    assert_eq!(who.json, json!({"role": "admin", "open": false}));
    let id = web.enqueue(json!({"kind": "k"})).await?.to_string();
    for (method, uri, body) in mutations(&id) {
        let answer = web.call(method.clone(), &uri, Some(ADMIN), body).await?;
        assert!(answer.status.is_success(), "{method} {uri}: {answer:?}");
    }
    Ok(())
}

#[tokio::test]
async fn basic_auth_carries_a_token() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let basic = |user: &str, password: &str| {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        Request::builder()
            .uri("/api/v1/whoami")
            .header(header::AUTHORIZATION, format!("Basic {encoded}"))
            .body(Body::empty())
    };
    let answer = web.send(basic("anyone", READ)?).await?;
    assert_eq!(answer.json["role"], "read");
    let answer = web.send(basic(ADMIN, "")?).await?;
    assert_eq!(answer.json["role"], "admin");
    let answer = web.send(basic("anyone", "wrong-password-0000000")?).await?;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    Ok(())
}

#[tokio::test]
async fn open_mode_lets_anyone_in_as_admin() -> anyhow::Result<()> {
    let web = Web::with_auth(hopper_web::AuthConfig::open()).await?;
    let who = web.call(Method::GET, "/api/v1/whoami", None, None).await?;
    assert_eq!(who.json, json!({"role": "admin", "open": true}));
    let created = web
        .call(
            Method::POST,
            "/api/v1/jobs",
            None,
            Some(json!({"kind": "k"})),
        )
        .await?;
    assert_eq!(created.status, StatusCode::CREATED);
    Ok(())
}

#[tokio::test]
async fn serve_refuses_open_mode_off_loopback() -> anyhow::Result<()> {
    let db = hopper::testing::TestDatabase::new().await?;
    let state = hopper_web::WebState::new(db.backend(), hopper_web::AuthConfig::open());
    let err = hopper_web::serve("0.0.0.0:0".parse()?, state).await;
    assert!(
        matches!(&err, Err(hopper_web::Error::Config(m)) if m.contains("without authentication")),
        "{err:?}"
    );
    Ok(())
}

#[tokio::test]
async fn public_parts_need_no_token() -> anyhow::Result<()> {
    let web = Web::new().await?;
    for uri in [
        "/",
        "/assets/app.js",
        "/assets/app.css",
        "/api/v1/openapi.json",
    ] {
        let answer = web.call(Method::GET, uri, None, None).await?;
        assert_eq!(answer.status, StatusCode::OK, "{uri}");
    }
    Ok(())
}
