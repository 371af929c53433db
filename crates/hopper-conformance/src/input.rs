//! Bad input is refused with a clear error before anything is written; hostile strings in
//! names and filters are data, never SQL.

use std::time::Duration;

use hopper_core::MAX_ARGS_BYTES;
use hopper_core::backend::JobClearParams;
use hopper_core::{Error, JobListParams, NewJob};
use serde_json::json;

use crate::{Harness, job};

/// Asserts `result` is `InvalidInput` mentioning `needle`.
fn assert_invalid<T: std::fmt::Debug>(result: hopper_core::Result<T>, needle: &str) {
    match result {
        Err(Error::InvalidInput(message)) => {
            assert!(
                message.contains(needle),
                "error {message:?} does not mention {needle:?}"
            );
        }
        other => panic!("expected InvalidInput mentioning {needle:?}, got {other:?}"),
    }
}

/// Asserts the store holds no job at all.
async fn assert_empty(h: &Harness) -> anyhow::Result<()> {
    let all = h
        .backend
        .job_list(&JobListParams {
            limit: 10,
            ..JobListParams::default()
        })
        .await?;
    assert!(all.is_empty(), "nothing may be written, found {all:?}");
    Ok(())
}

/// Scalar args are refused and nothing is written.
pub async fn scalar_args_are_refused_and_nothing_is_written(h: &Harness) -> anyhow::Result<()> {
    for (args, named) in [
        (json!("a string"), "a string"),
        (json!(42), "a number"),
        (json!(null), "null"),
        (json!(true), "a boolean"),
    ] {
        let bad = NewJob::new("k", args);
        assert_invalid(h.backend.job_insert(&bad).await, named);
        assert_invalid(h.backend.job_insert_many(&[bad]).await, named);
    }
    assert_empty(h).await
}

/// Args over the size limit are refused.
pub async fn args_over_the_size_limit_are_refused(h: &Harness) -> anyhow::Result<()> {
    // `{"b":"…"}` is 8 bytes plus the string.
    let at_limit = NewJob::new("k", json!({ "b": "x".repeat(MAX_ARGS_BYTES - 8) }));
    let over = NewJob::new("k", json!({ "b": "x".repeat(MAX_ARGS_BYTES - 7) }));
    assert_invalid(h.backend.job_insert(&over).await, "over the limit");
    assert_invalid(
        h.backend.job_insert_many(std::slice::from_ref(&over)).await,
        "over the limit",
    );
    assert_empty(h).await?;
    h.backend.job_insert(&at_limit).await?;
    assert_eq!(h.get(at_limit.id).await?.args, at_limit.args);
    Ok(())
}

/// Bad queue and kind names are refused.
pub async fn bad_queue_and_kind_names_are_refused(h: &Harness) -> anyhow::Result<()> {
    let bad_names = [
        "it's",
        "a\"b",
        "q;drop table jobs",
        "two words",
        "",
        "tab\there",
        "newline\n",
        "ünicode",
    ];
    for name in bad_names {
        assert_invalid(h.backend.job_insert(&job("k", name)).await, "queue name");
        assert_invalid(
            h.backend.job_insert(&NewJob::new(name, json!({}))).await,
            "kind name",
        );
    }
    assert_invalid(
        h.backend.job_insert(&job("k", &"q".repeat(129))).await,
        "1 to 128",
    );
    assert_empty(h).await
}

/// One bad job in a bulk insert writes none.
pub async fn one_bad_job_in_a_bulk_insert_writes_none(h: &Harness) -> anyhow::Result<()> {
    let mut jobs: Vec<NewJob> = (0..999).map(|_| job("ok", "default")).collect();
    jobs.push(job("ok", "bad queue"));
    assert_invalid(h.backend.job_insert_many(&jobs).await, "queue name");
    let mut jobs: Vec<NewJob> = (0..999).map(|_| job("ok", "default")).collect();
    jobs.insert(500, NewJob::new("ok", json!("scalar")));
    assert_invalid(h.backend.job_insert_many(&jobs).await, "args");
    assert_empty(h).await?;
    // A duplicate id is refused by the store itself: still all or nothing.
    let mut jobs: Vec<NewJob> = (0..10).map(|_| job("ok", "default")).collect();
    jobs[9].id = jobs[3].id;
    assert!(h.backend.job_insert_many(&jobs).await.is_err());
    assert_empty(h).await
}

/// Invalid options are refused.
pub async fn invalid_options_are_refused(h: &Harness) -> anyhow::Result<()> {
    assert_invalid(
        h.backend
            .job_insert(&job("k", "default").with_max_attempts(0))
            .await,
        "max_attempts",
    );
    assert_invalid(
        h.backend
            .job_insert(&job("k", "default").with_timeout(Duration::ZERO))
            .await,
        "timeout",
    );
    assert_invalid(
        h.backend
            .job_insert(&job("k", "default").with_timeout(Duration::from_secs(30 * 86_400)))
            .await,
        "timeout",
    );
    assert_empty(h).await
}

/// Injection in filters is harmless.
pub async fn injection_in_filters_is_harmless(h: &Harness) -> anyhow::Result<()> {
    let id = h.insert(job("k", "default")).await?;
    let hostile = [
        "default' OR '1'='1",
        "'; DROP TABLE jobs; --",
        "default\"; DELETE FROM jobs; --",
        "k) OR (1=1",
    ];
    for s in hostile {
        let params = JobListParams {
            queue: Some(s.to_owned()),
            limit: 10,
            ..JobListParams::default()
        };
        assert!(h.backend.job_list(&params).await?.is_empty(), "{s:?}");
        let params = JobListParams {
            kind: Some(s.to_owned()),
            limit: 10,
            ..JobListParams::default()
        };
        assert!(h.backend.job_list(&params).await?.is_empty(), "{s:?}");
        // Claim and clear either refuse the name or find nothing; neither touches the job.
        match h.claim(s, 10).await {
            Ok(jobs) => assert!(jobs.is_empty(), "{s:?}"),
            Err(e) => assert!(
                matches!(e.downcast_ref(), Some(Error::InvalidInput(_))),
                "{e}"
            ),
        }
        match h
            .backend
            .job_clear(&JobClearParams {
                queue: Some(s.to_owned()),
            })
            .await
        {
            Ok(n) => assert_eq!(n, 0, "{s:?}"),
            Err(e) => assert!(matches!(e, Error::InvalidInput(_)), "{e}"),
        }
    }
    let got = h.get(id).await?;
    assert_eq!(got.state, hopper_core::JobState::Available);
    assert_eq!(h.claim_one("default").await?.lease.job_id, id);
    Ok(())
}
