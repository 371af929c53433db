//! `/api/v1/queues`, `/api/v1/stats` and `/metrics`.

use std::time::Duration;

use axum::http::{StatusCode, header};
use hopper::{JobContext, JobError, Runtime, RuntimeConfig, Worker, Workers};
use serde_json::{Value, json};

use crate::common::{Web, completed, failed};

#[tokio::test]
async fn queues_list_counts_by_state() -> anyhow::Result<()> {
    let web = Web::new().await?;
    for _ in 0..3 {
        web.enqueue(json!({"kind": "k", "queue": "alpha"})).await?;
    }
    web.enqueue(json!({"kind": "k", "queue": "beta", "delay_ms": 60_000}))
        .await?;
    web.work("alpha", completed()).await?;
    web.enqueue(json!({"kind": "k", "queue": "alpha"})).await?;

    let answer = web.get("/api/v1/queues").await?;
    assert_eq!(answer.status, StatusCode::OK);
    let queues = answer.json["queues"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(queues.len(), 2);
    assert_eq!(queues[0]["queue"], "alpha");
    assert_eq!(queues[0]["completed"], 3);
    assert_eq!(queues[0]["available"], 1);
    assert_eq!(queues[1]["queue"], "beta");
    assert_eq!(queues[1]["scheduled"], 1);
    Ok(())
}

#[tokio::test]
async fn queues_pause_and_resume() -> anyhow::Result<()> {
    let web = Web::new().await?;
    web.enqueue(json!({"kind": "k", "queue": "busy"})).await?;
    let paused = web.post("/api/v1/queues/busy/pause", json!({})).await?;
    assert_eq!(paused.status, StatusCode::OK, "{paused:?}");
    assert_eq!(paused.json["paused"], true);
    // A queue with no job can be paused ahead of time; it is listed.
    web.post("/api/v1/queues/later/pause", json!({})).await?;
    let queues = web.get("/api/v1/queues").await?.json["queues"].clone();
    assert_eq!(queues[0]["queue"], "busy");
    assert_eq!(queues[0]["paused"], true);
    assert_eq!(queues[0]["available"], 1);
    assert_eq!(queues[1]["queue"], "later");
    assert_eq!(queues[1]["paused"], true);
    assert_eq!(queues[1]["available"], 0);
    // Paused: nothing is claimed.
    assert_eq!(web.work("busy", completed()).await?, 0);

    let resumed = web.post("/api/v1/queues/busy/resume", json!({})).await?;
    assert_eq!(resumed.json["paused"], false);
    let queues = web.get("/api/v1/queues").await?.json["queues"].clone();
    assert_eq!(queues[0]["paused"], false);

    let bad = web.post("/api/v1/queues/a%20b/pause", json!({})).await?;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST, "{bad:?}");
    Ok(())
}

#[tokio::test]
async fn stats_give_totals_throughput_and_latency() -> anyhow::Result<()> {
    let web = Web::new().await?;
    for _ in 0..4 {
        web.enqueue(json!({"kind": "k", "queue": "a"})).await?;
    }
    web.enqueue(json!({"kind": "k", "queue": "b", "max_attempts": 1}))
        .await?;
    web.enqueue(json!({"kind": "k", "queue": "c"})).await?;
    web.work("a", completed()).await?;
    web.work("b", failed()).await?;

    let answer = web.get("/api/v1/stats").await?;
    assert_eq!(answer.status, StatusCode::OK, "{answer:?}");
    let s = &answer.json;
    assert_eq!(s["queues"], 3);
    assert_eq!(s["totals"]["completed"], 4);
    assert_eq!(s["totals"]["failed"], 1);
    assert_eq!(s["totals"]["available"], 1);
    assert_eq!(s["window_minutes"], 60);
    let minutes = s["minutes"].as_array().cloned().unwrap_or_default();
    assert_eq!(minutes.len(), 60);
    let sum = |field: &str| {
        minutes
            .iter()
            .filter_map(|m| m[field].as_i64())
            .sum::<i64>()
    };
    assert_eq!(sum("completed"), 4);
    assert_eq!(sum("failed"), 1);
    assert_eq!(s["summary"]["completed"], 4);
    assert_eq!(s["summary"]["duration_avg_ms"], 12.0);
    assert!(
        s["summary"]["latency_avg_ms"]
            .as_f64()
            .is_some_and(|l| l >= 0.0)
    );

    let short = web.get("/api/v1/stats?minutes=5").await?;
    assert_eq!(short.json["minutes"].as_array().map(Vec::len), Some(5));
    let bad = web.get("/api/v1/stats?minutes=0").await?;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    Ok(())
}

#[tokio::test]
async fn metrics_show_queue_gauges() -> anyhow::Result<()> {
    let web = Web::new().await?;
    web.enqueue(json!({"kind": "k", "queue": "gauged"})).await?;
    let answer = web.get("/metrics").await?;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(
        answer
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok()),
        Some(hopper_web::metrics::CONTENT_TYPE)
    );
    assert!(
        answer
            .text
            .contains("hopper_jobs{queue=\"gauged\",state=\"available\"} 1\n")
    );
    assert!(
        answer
            .text
            .contains("hopper_queue_oldest_available_seconds{queue=\"gauged\"}")
    );
    Ok(())
}

struct Sometimes;

/// A worker whose handler says it started (`reached`), then returns when told (`go`).
#[derive(Clone, Default)]
struct Gate {
    reached: std::sync::Arc<tokio::sync::Notify>,
    go: std::sync::Arc<tokio::sync::Notify>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Gated {}

impl hopper::JobArgs for Gated {
    const KIND: &'static str = "gated";
}

#[async_trait::async_trait]
impl Worker for Gate {
    type Args = Gated;
    async fn process(&self, _ctx: &JobContext, _args: Gated) -> Result<(), JobError> {
        self.reached.notify_one();
        self.go.notified().await;
        Ok(())
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Flip {
    fail: bool,
}

impl hopper::JobArgs for Flip {
    const KIND: &'static str = "flip";
}

#[async_trait::async_trait]
impl Worker for Sometimes {
    type Args = Flip;
    async fn process(&self, _ctx: &JobContext, args: Flip) -> Result<(), JobError> {
        if args.fail {
            Err(JobError::Permanent("asked to fail".to_owned()))
        } else {
            Ok(())
        }
    }
}

/// The runtime's counters and histograms, recorded through the `metrics` facade, appear on
/// `/metrics` once the recorder is installed, the count of held outcomes among them. (The
/// only test that installs it: the recorder is global to the process. Its queues are its
/// own, so other tests cannot disturb its counts.)
#[tokio::test]
async fn metrics_show_runtime_counters_and_histograms() -> anyhow::Result<()> {
    let handle = hopper_web::metrics::install_recorder()?;
    let db = hopper::testing::TestDatabase::new().await?;
    let auth = hopper_web::AuthConfig::tokens([crate::common::ADMIN], Vec::<String>::new())?;
    let state = hopper_web::WebState::new(db.backend(), auth).with_prometheus(handle);
    let web = Web {
        router: hopper_web::router(state),
        db,
    };
    let jobs: Vec<Value> = (0..5)
        .map(|n| json!({"kind": "flip", "queue": "metered", "args": {"fail": n == 0}}))
        .collect();
    let answer = web
        .post("/api/v1/jobs/batch", json!({ "jobs": jobs }))
        .await?;
    assert_eq!(answer.status, StatusCode::CREATED);

    // And one job whose row the test holds when its handler ends: its outcome is held.
    let gate = Gate::default();
    let gated = hopper::NewJob::of(&Gated {})?.with_queue("metered_held");
    let gated_id = gated.id;
    hopper::Client::new(web.backend()).insert(gated).await?;

    let mut workers = Workers::new();
    workers.register(Sometimes);
    workers.register(gate.clone());
    let runtime = Runtime::new(
        web.backend(),
        workers,
        RuntimeConfig::default().with_queues(["metered", "metered_held"]),
    )
    .start()
    .await?;
    gate.reached.notified().await;
    let hold = web.db.hold_job(gated_id).await?;
    gate.go.notify_one();
    let held = "hopper_outcomes_held_total";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !web.get("/metrics").await?.text.contains(held) {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "no held outcome counted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    hold.release().await?;
    let waited = web
        .db
        .wait_for("metered", Duration::from_secs(30), |s| {
            s.completed == 4 && s.failed == 1
        })
        .await;
    let gated_done = web
        .db
        .wait_for("metered_held", Duration::from_secs(30), |s| {
            s.completed == 1
        })
        .await;
    runtime.shutdown().await;
    waited.map_err(anyhow::Error::msg)?;
    gated_done.map_err(anyhow::Error::msg)?;

    let page = web.get("/metrics").await?.text;
    let has = |line: &str| page.lines().any(|l| l == line);
    assert!(
        has("hopper_jobs_enqueued_total{queue=\"metered\",kind=\"flip\"} 5"),
        "{page}"
    );
    assert!(
        has("hopper_jobs_completed_total{queue=\"metered\",kind=\"flip\"} 4"),
        "{page}"
    );
    assert!(
        has("hopper_jobs_failed_total{queue=\"metered\",kind=\"flip\"} 1"),
        "{page}"
    );
    assert!(
        has("hopper_job_duration_seconds_count{queue=\"metered\",kind=\"flip\"} 5"),
        "{page}"
    );
    assert!(
        page.contains(
            "hopper_job_start_latency_seconds_bucket{queue=\"metered\",kind=\"flip\",le=\"0.001\"}"
        ),
        "{page}"
    );
    assert!(
        has("hopper_jobs{queue=\"metered\",state=\"completed\"} 4"),
        "{page}"
    );
    Ok(())
}

/// With readings reused however cheap (a factor large enough that the test never outlives
/// one), `/api/v1/queues`, `/api/v1/stats` and `/metrics` serve one reading of the counts:
/// a job enqueued after it shows in none of them. With the default reuse, a cheap reading
/// is never reused and each request sees the job at once.
#[tokio::test]
async fn the_whole_table_readings_are_shared_and_reused_only_as_told() -> anyhow::Result<()> {
    let mut web = Web::new().await?;
    let reuse = hopper_web::StatsReuse {
        above: Duration::ZERO,
        factor: u32::MAX,
        at_most: Duration::from_secs(3600),
    };
    let auth = hopper_web::AuthConfig::tokens([crate::common::ADMIN], [crate::common::READ])?;
    let reusing =
        hopper_web::router(hopper_web::WebState::new(web.backend(), auth).with_stats_reuse(reuse));
    let live = std::mem::replace(&mut web.router, reusing);

    web.enqueue(json!({"kind": "k", "queue": "alpha"})).await?;
    let available = |answer: &Value| answer["queues"][0]["available"].clone();
    assert_eq!(available(&web.get("/api/v1/queues").await?.json), 1);
    web.enqueue(json!({"kind": "k", "queue": "alpha"})).await?;
    assert_eq!(available(&web.get("/api/v1/queues").await?.json), 1);
    let stats = web.get("/api/v1/stats").await?.json;
    assert_eq!(stats["totals"]["available"], 1, "{stats}");
    let metrics = web.get("/metrics").await?.text;
    assert!(
        metrics.contains(r#"hopper_jobs{queue="alpha",state="available"} 1"#),
        "{metrics}"
    );

    web.router = live;
    assert_eq!(available(&web.get("/api/v1/queues").await?.json), 2);
    web.enqueue(json!({"kind": "k", "queue": "alpha"})).await?;
    assert_eq!(available(&web.get("/api/v1/queues").await?.json), 3);
    Ok(())
}
