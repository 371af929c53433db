//! Enqueue, read, retry, cancel, delete, bulk retry.

use axum::http::{Method, StatusCode, header};
use serde_json::json;

use crate::common::{ADMIN, Web, code, completed, failed, message};

#[tokio::test]
async fn enqueue_with_every_option_then_read_it_back() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let id = uuid::Uuid::now_v7();
    let answer = web
        .post(
            "/api/v1/jobs",
            json!({
                "id": id, "kind": "send_email", "args": {"to": "ada@example.com"},
                "queue": "mail", "priority": "high", "run_at": "2099-01-01T00:00:00Z",
                "max_attempts": 3, "timeout_ms": 5000,
            }),
        )
        .await?;
    assert_eq!(answer.status, StatusCode::CREATED, "{answer:?}");
    assert_eq!(
        answer
            .headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok()),
        Some(format!("/api/v1/jobs/{id}").as_str())
    );
    let job = &answer.json;
    assert_eq!(job["id"], json!(id));
    assert_eq!(job["queue"], "mail");
    assert_eq!(job["kind"], "send_email");
    assert_eq!(job["args"]["to"], "ada@example.com");
    assert_eq!(job["priority"], 1);
    assert_eq!(job["state"], "scheduled");
    assert_eq!(job["max_attempts"], 3);
    assert_eq!(job["timeout_ms"], 5000);
    assert_eq!(job["attempts_used"], 0);
    assert_eq!(job["outcome"], "inserted");

    let read = web.get(&format!("/api/v1/jobs/{id}")).await?;
    assert_eq!(read.status, StatusCode::OK);
    assert_eq!(read.json["run_at"], job["run_at"]);

    // The same id again is a conflict, and writes nothing more.
    let again = web
        .post("/api/v1/jobs", json!({"id": id, "kind": "send_email"}))
        .await?;
    assert_eq!(again.status, StatusCode::CONFLICT, "{again:?}");
    assert_eq!(code(&again), "conflict");
    // Said as such, not in the database's words about its constraint.
    assert_eq!(
        message(&again),
        format!("a job with id {id} already exists")
    );
    let batch = web
        .post(
            "/api/v1/jobs/batch",
            json!({"jobs": [{"kind": "other"}, {"id": id, "kind": "send_email"}]}),
        )
        .await?;
    assert_eq!(batch.status, StatusCode::CONFLICT, "{batch:?}");
    assert_eq!(
        message(&batch),
        format!("a job with id {id} already exists")
    );
    assert_eq!(web.job_count().await?, 1);
    Ok(())
}

#[tokio::test]
async fn enqueue_defaults_and_delay() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let now = web.post("/api/v1/jobs", json!({"kind": "k"})).await?;
    assert_eq!(now.status, StatusCode::CREATED);
    assert_eq!(now.json["queue"], "default");
    assert_eq!(now.json["state"], "available");
    assert_eq!(now.json["args"], json!({}));
    assert_eq!(now.json["priority"], 2);
    let later = web
        .post(
            "/api/v1/jobs",
            json!({"kind": "k", "delay_ms": 3_600_000, "priority": 7}),
        )
        .await?;
    assert_eq!(later.json["state"], "scheduled");
    assert_eq!(later.json["priority"], 7);
    Ok(())
}

#[tokio::test]
async fn an_integer_beyond_64_bits_is_refused_naming_its_path() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let post = |uri: &str, body: &'static str| {
        axum::http::Request::builder()
            .method(Method::POST)
            .uri(uri)
            .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"))
            .header(header::CONTENT_TYPE, "application/json")
            .body(axum::body::Body::from(body))
    };
    for (uri, body, said) in [
        (
            "/api/v1/jobs",
            r#"{"kind": "k", "args": {"id": 123456789012345678901}}"#,
            "args.id: the integer 123456789012345678901 does not fit in 64 bits",
        ),
        (
            "/api/v1/jobs",
            r#"{"kind": "k", "meta": {"n": 18446744073709551616}}"#,
            "meta.n: the integer 18446744073709551616 does not fit in 64 bits",
        ),
        (
            "/api/v1/jobs/batch",
            r#"{"jobs": [{"kind": "a"}, {"kind": "b", "args": [-9223372036854775809]}]}"#,
            "jobs[1].args[0]: the integer -9223372036854775809 does not fit in 64 bits",
        ),
        (
            "/api/v1/jobs",
            r#"{"kind": "k", "delay_ms": 100000000000000000000}"#,
            "delay_ms: the integer 100000000000000000000 does not fit in 64 bits",
        ),
    ] {
        let answer = web.send(post(uri, body)?).await?;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{body}: {answer:?}");
        assert_eq!(code(&answer), "invalid_input");
        assert!(message(&answer).starts_with(said), "{answer:?}");
        assert!(
            message(&answer).ends_with("send it as a string"),
            "{answer:?}"
        );
    }
    assert_eq!(web.job_count().await?, 0);
    // The 64-bit extremes are kept exactly, a number written as a double is a double.
    let body = r#"{"kind": "k", "args": {"max": 18446744073709551615, "min": -9223372036854775808, "big": 1e30}}"#;
    let answer = web.send(post("/api/v1/jobs", body)?).await?;
    assert_eq!(answer.status, StatusCode::CREATED, "{answer:?}");
    assert_eq!(
        answer.json["args"],
        json!({"max": u64::MAX, "min": i64::MIN, "big": 1e30})
    );
    Ok(())
}

#[tokio::test]
async fn bad_input_is_refused_with_a_clear_message_and_nothing_written() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let cases = [
        (json!({"kind": "k", "queue": "no spaces"}), "queue name"),
        (json!({"queue": "q"}), "missing field `kind`"),
        (
            json!({"kind": "k", "args": "text"}),
            "args must be a JSON object or array",
        ),
        (
            json!({"kind": "k", "args": {"blob": "x".repeat(1024 * 1024 + 1)}}),
            "over the limit",
        ),
        (json!({"kind": "k", "priority": "urgent"}), "priority"),
        (json!({"kind": "k", "max_attempts": 0}), "max_attempts"),
        (json!({"kind": "k", "timeout_ms": 0}), "timeout"),
        (
            json!({"kind": "k", "delay_ms": 1, "run_at": "2030-01-01T00:00:00Z"}),
            "not both",
        ),
        (json!({"kind": "k", "id": uuid::Uuid::new_v4()}), "UUIDv7"),
        (
            json!({"kind": "k", "id": "ffffffff-ffff-7fff-bfff-ffffffffffff"}),
            "ahead of the server's clock",
        ),
        (
            json!({"kind": "k", "colour": "blue"}),
            "unknown field `colour`",
        ),
        (json!({"kind": "k", "run_at": "tomorrow"}), "run_at"),
    ];
    for (body, expected) in cases {
        let answer = web.post("/api/v1/jobs", body.clone()).await?;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{body}: {answer:?}");
        assert_eq!(code(&answer), "invalid_input");
        assert!(
            message(&answer).contains(expected),
            "{expected:?} not in {:?}",
            message(&answer)
        );
    }

    // Not JSON at all.
    let request = axum::http::Request::builder()
        .method(Method::POST)
        .uri("/api/v1/jobs")
        .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from("{\"kind\": "))?;
    let answer = web.send(request).await?;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
    assert!(message(&answer).contains("JSON"), "{answer:?}");

    // JSON without saying so.
    let request = axum::http::Request::builder()
        .method(Method::POST)
        .uri("/api/v1/jobs")
        .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"))
        .body(axum::body::Body::from("{\"kind\": \"k\"}"))?;
    let answer = web.send(request).await?;
    assert_eq!(
        answer.status,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "{answer:?}"
    );

    // A bad job in a batch: the error names it, and the good ones are not written either.
    let answer = web
        .post(
            "/api/v1/jobs/batch",
            json!({"jobs": [{"kind": "a"}, {"kind": "b"}, {"kind": "c", "queue": "x y"}]}),
        )
        .await?;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
    assert!(message(&answer).starts_with("jobs[2]: "), "{answer:?}");
    let answer = web.post("/api/v1/jobs/batch", json!({"jobs": []})).await?;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST);

    assert_eq!(web.job_count().await?, 0);
    Ok(())
}

#[tokio::test]
async fn oversized_body_is_refused() -> anyhow::Result<()> {
    let db = hopper::testing::TestDatabase::new().await?;
    let auth = hopper_web::AuthConfig::tokens([ADMIN], Vec::<String>::new())?;
    let state = hopper_web::WebState::new(db.backend(), auth).with_max_body_bytes(1024);
    let web = Web {
        router: hopper_web::router(state),
        db,
    };
    let answer = web
        .post(
            "/api/v1/jobs",
            json!({"kind": "k", "args": {"x": "y".repeat(2048)}}),
        )
        .await?;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE, "{answer:?}");
    assert_eq!(code(&answer), "payload_too_large");
    assert_eq!(web.job_count().await?, 0);
    Ok(())
}

#[tokio::test]
async fn batch_enqueue_is_all_or_nothing() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let jobs: Vec<_> = (0..250)
        .map(|n| json!({"kind": "count", "args": {"n": n}, "queue": "batch"}))
        .collect();
    let answer = web
        .post("/api/v1/jobs/batch", json!({ "jobs": jobs }))
        .await?;
    assert_eq!(answer.status, StatusCode::CREATED, "{answer:?}");
    assert_eq!(answer.json["count"], 250);
    assert_eq!(answer.json["inserted"], 250);
    assert_eq!(answer.json["ids"].as_array().map(Vec::len), Some(250));
    let stats = web.db.queue_stats("batch").await?;
    assert_eq!(stats.available, 250);
    Ok(())
}

#[tokio::test]
async fn get_unknown_or_malformed_ids() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let missing = web
        .get(&format!("/api/v1/jobs/{}", uuid::Uuid::now_v7()))
        .await?;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(code(&missing), "not_found");
    let bad = web.get("/api/v1/jobs/not-a-uuid").await?;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(message(&bad).contains("not a job id"), "{bad:?}");
    let nowhere = web.get("/api/v1/nothing-here").await?;
    assert_eq!(nowhere.status, StatusCode::NOT_FOUND);
    assert_eq!(code(&nowhere), "not_found");
    let wrong_method = web
        .call(Method::PUT, "/api/v1/jobs", Some(ADMIN), None)
        .await?;
    assert_eq!(
        wrong_method.status,
        StatusCode::METHOD_NOT_ALLOWED,
        "{wrong_method:?}"
    );
    Ok(())
}

#[tokio::test]
async fn retry_cancel_and_delete() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let id = web.enqueue(json!({"kind": "k", "queue": "work"})).await?;

    // Available: cannot be retried, can be cancelled.
    let retry = web
        .post(&format!("/api/v1/jobs/{id}/retry"), json!({}))
        .await?;
    assert_eq!(retry.status, StatusCode::CONFLICT, "{retry:?}");
    let cancel = web
        .post(&format!("/api/v1/jobs/{id}/cancel"), json!({}))
        .await?;
    assert_eq!(cancel.status, StatusCode::OK, "{cancel:?}");
    assert_eq!(cancel.json["state"], "cancelled");
    let again = web
        .post(&format!("/api/v1/jobs/{id}/cancel"), json!({}))
        .await?;
    assert_eq!(again.status, StatusCode::CONFLICT);

    // Cancelled: retried, available again.
    let retry = web
        .post(&format!("/api/v1/jobs/{id}/retry"), json!({}))
        .await?;
    assert_eq!(retry.status, StatusCode::OK, "{retry:?}");
    assert_eq!(retry.json["state"], "available");

    // Running: cannot be deleted.
    let claimed = web
        .backend()
        .job_claim(&hopper::backend::ClaimParams {
            queue: "work".to_owned(),
            node: uuid::Uuid::now_v7(),
            limit: 1,
            lease: std::time::Duration::from_secs(60),
            kinds: None,
        })
        .await?;
    assert_eq!(claimed.len(), 1);
    let delete = web
        .call(
            Method::DELETE,
            &format!("/api/v1/jobs/{id}"),
            Some(ADMIN),
            None,
        )
        .await?;
    assert_eq!(delete.status, StatusCode::CONFLICT, "{delete:?}");
    assert!(message(&delete).contains("running"), "{delete:?}");

    // Finished: deleted, then gone.
    web.backend()
        .job_finish_many(&[hopper::backend::Finish {
            lease: claimed[0].lease,
            outcome: completed(),
        }])
        .await?;
    let delete = web
        .call(
            Method::DELETE,
            &format!("/api/v1/jobs/{id}"),
            Some(ADMIN),
            None,
        )
        .await?;
    assert_eq!(delete.status, StatusCode::NO_CONTENT, "{delete:?}");
    assert!(delete.text.is_empty());
    let gone = web.get(&format!("/api/v1/jobs/{id}")).await?;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    let delete = web
        .call(
            Method::DELETE,
            &format!("/api/v1/jobs/{id}"),
            Some(ADMIN),
            None,
        )
        .await?;
    assert_eq!(delete.status, StatusCode::NOT_FOUND);
    Ok(())
}

#[tokio::test]
async fn failed_job_detail_shows_its_error_history() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let id = web
        .enqueue(json!({"kind": "k", "queue": "q", "max_attempts": 1}))
        .await?;
    assert_eq!(web.work("q", failed()).await?, 1);
    let job = web.get(&format!("/api/v1/jobs/{id}")).await?;
    assert_eq!(job.json["state"], "failed");
    assert_eq!(job.json["attempts_used"], 1);
    let errors = job.json["errors"].as_array().cloned().unwrap_or_default();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["error"], "boom");
    assert_eq!(errors[0]["attempt"], 1);
    assert_eq!(errors[0]["duration_ms"], 7);
    Ok(())
}

#[tokio::test]
async fn bulk_retry_of_failed_jobs_by_queue() -> anyhow::Result<()> {
    let web = Web::new().await?;
    for queue in ["a", "a", "a", "b"] {
        web.enqueue(json!({"kind": "k", "queue": queue, "max_attempts": 1}))
            .await?;
    }
    // Not due yet, so not claimed: it stays scheduled and is not retried.
    web.enqueue(json!({"kind": "k", "queue": "a", "delay_ms": 3_600_000}))
        .await?;
    assert_eq!(web.work("a", failed()).await?, 3);
    assert_eq!(web.work("b", failed()).await?, 1);
    assert_eq!(web.db.queue_stats("a").await?.failed, 3);

    let answer = web
        .post("/api/v1/jobs/retry-failed", json!({"queue": "a"}))
        .await?;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    assert_eq!(answer.json["retried"], 3);
    let a = web.db.queue_stats("a").await?;
    assert_eq!((a.failed, a.available + a.scheduled), (0, 4));
    assert_eq!(web.db.queue_stats("b").await?.failed, 1);

    let bad = web
        .post("/api/v1/jobs/retry-failed", json!({"queue": "a;b"}))
        .await?;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    let all = web.post("/api/v1/jobs/retry-failed", json!({})).await?;
    assert_eq!(all.json["retried"], 1);
    Ok(())
}

#[tokio::test]
async fn unique_keys_answer_with_the_holder() -> anyhow::Result<()> {
    let web = Web::new().await?;
    let body = json!({"kind": "welcome", "queue": "mail", "unique_key": "user:42/welcome"});
    let first = web.post("/api/v1/jobs", body.clone()).await?;
    assert_eq!(first.status, StatusCode::CREATED, "{first:?}");
    assert_eq!(first.json["outcome"], "inserted");
    let again = web.post("/api/v1/jobs", body).await?;
    assert_eq!(again.status, StatusCode::OK, "{again:?}");
    assert_eq!(again.json["outcome"], "duplicate");
    assert_eq!(again.json["id"], first.json["id"], "the holder's id");

    let reject = json!({"kind": "welcome", "queue": "mail", "unique_key": "user:42/welcome",
                        "unique_policy": "reject"});
    let refused = web.post("/api/v1/jobs", reject).await?;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{refused:?}");

    let replace = json!({"kind": "welcome", "queue": "mail", "unique_key": "user:42/welcome",
                         "unique_policy": "replace", "args": {"v": 2}, "group": "tenant-1"});
    let replaced = web.post("/api/v1/jobs", replace).await?;
    assert_eq!(replaced.status, StatusCode::OK, "{replaced:?}");
    assert_eq!(replaced.json["outcome"], "replaced");
    assert_eq!(replaced.json["args"], json!({"v": 2}));
    assert_eq!(web.job_count().await?, 1);

    let batch = web
        .post(
            "/api/v1/jobs/batch",
            json!({"jobs": [
                {"kind": "welcome", "queue": "mail", "unique_key": "user:42/welcome"},
                {"kind": "welcome", "queue": "mail", "unique_key": "user:43/welcome"},
                {"kind": "plain", "queue": "mail"},
            ]}),
        )
        .await?;
    assert_eq!(batch.status, StatusCode::CREATED, "{batch:?}");
    assert_eq!(batch.json["inserted"], 2);
    assert_eq!(
        batch.json["outcomes"],
        json!(["duplicate", "inserted", "inserted"])
    );
    assert_eq!(batch.json["ids"][0], first.json["id"]);
    assert_eq!(web.job_count().await?, 3);

    // Two jobs of one batch sharing a key: the batch is refused naming them both, not the
    // first as a holder (it was rolled back and never existed).
    let twice = json!({"kind": "welcome", "unique_key": "user:44/welcome",
                       "unique_policy": "reject"});
    let batch = web
        .post(
            "/api/v1/jobs/batch",
            json!({"jobs": [{"kind": "plain"}, twice, twice]}),
        )
        .await?;
    assert_eq!(batch.status, StatusCode::CONFLICT, "{batch:?}");
    assert_eq!(
        message(&batch),
        "jobs[1] and jobs[2] of the batch share the unique key \"user:44/welcome\", and the \
         reject policy refuses the second"
    );
    assert_eq!(web.job_count().await?, 3);
    Ok(())
}

#[tokio::test]
async fn arrays_are_not_read_as_objects() -> anyhow::Result<()> {
    // serde would read a struct from an array by position; the API refuses it.
    let web = Web::new().await?;
    for (uri, body) in [
        ("/api/v1/jobs", json!(["mail"])),
        ("/api/v1/jobs/batch", json!([[{"kind": "k"}]])),
        ("/api/v1/jobs/batch", json!({"jobs": [["k"]]})),
        ("/api/v1/jobs/retry-failed", json!(["q", "k"])),
    ] {
        let answer = web.post(uri, body.clone()).await?;
        assert_eq!(
            answer.status,
            StatusCode::BAD_REQUEST,
            "{uri} {body}: {answer:?}"
        );
        assert!(
            message(&answer).contains("expected a JSON object"),
            "{answer:?}"
        );
    }
    assert_eq!(web.job_count().await?, 0, "nothing was written");
    Ok(())
}

#[tokio::test]
async fn extreme_numbers_round_trip_and_nul_is_refused() -> anyhow::Result<()> {
    // PostgreSQL prints f64::MAX in jsonb as 309 digits; the job must still be readable.
    let web = Web::new().await?;
    let args =
        json!({"max": f64::MAX, "tiny": -1.626_282_710_193_484_5e-184, "min": f64::MIN_POSITIVE});
    let id = web.enqueue(json!({"kind": "k", "args": args})).await?;
    let job = web.get(&format!("/api/v1/jobs/{id}")).await?;
    assert_eq!(job.status, StatusCode::OK, "{job:?}");
    assert_eq!(job.json["args"], args);
    let page = web.get("/api/v1/jobs").await?;
    assert_eq!(page.status, StatusCode::OK, "{page:?}");

    // jsonb cannot hold U+0000: refused up front, not a database error.
    for args in [
        json!({"a": "x\u{0}y"}),
        json!({"\u{0}": 1}),
        json!([["\u{0}"]]),
    ] {
        let answer = web
            .post("/api/v1/jobs", json!({"kind": "k", "args": args}))
            .await?;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{answer:?}");
        assert!(message(&answer).contains("U+0000"), "{answer:?}");
    }
    assert_eq!(web.job_count().await?, 1);
    Ok(())
}
