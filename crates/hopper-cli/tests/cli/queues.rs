//! `hopper queues …`, `hopper cron list`, `hopper enqueue --group/--unique-key` and
//! `hopper jobs cancel` on a running job, run as a user runs them against PostgreSQL.

use std::process::{Command, Stdio};
use std::time::Duration;

use hopper::backend::{ClaimParams, JobGetParams};
use hopper::testing::TestDatabase;
use hopper::{JobState, NewJob, PeriodicJob, Runtime, RuntimeConfig, Workers};
use serde_json::Value;

/// Runs `hopper args…` against `db`'s schema; (success, stdout, stderr).
fn hopper(db: &TestDatabase, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args(args)
        .env("DATABASE_URL", db.url())
        .env("HOPPER_SCHEMA", db.schema())
        .env_remove("HOPPER_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("the hopper binary runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn json(db: &TestDatabase, args: &[&str]) -> Value {
    let (ok, out, err) = hopper(db, args);
    assert!(ok, "hopper {args:?} failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

#[tokio::test]
async fn queues_pause_resume_limit_and_list() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    // A queue with no jobs and no settings may be a typo: refused, nothing written.
    for verb in ["pause", "resume"] {
        let (ok, _, err) = hopper(&db, &["queues", verb, "mail"]);
        assert!(!ok && err.contains("--create"), "{verb}: {err}");
    }
    let (ok, _, err) = hopper(&db, &["queues", "limit", "mail", "--concurrency", "5"]);
    assert!(!ok && err.contains("--create"), "{err}");
    assert!(hopper::Client::new(db.backend()).queues().await?.is_empty());
    let paused = json(&db, &["--json", "queues", "pause", "mail", "--create"]);
    assert_eq!(paused["paused"], true);
    let limited = json(
        &db,
        &[
            "--json",
            "queues",
            "limit",
            "mail",
            "--concurrency",
            "5",
            "--rate",
            "100/s",
        ],
    );
    assert_eq!(limited["max_running"], 5);
    assert_eq!(limited["rate"], "100/s (burst 10)");
    let (ok, out, _) = hopper(&db, &["queues", "resume", "mail"]);
    assert!(ok);
    assert!(out.contains("queue mail is active"), "{out}");
    assert!(out.contains("at most 5 running"), "{out}");

    let list = json(&db, &["--json", "queues", "list"]);
    let mail = &list["queues"][0];
    assert_eq!(
        (mail["queue"].as_str(), mail["paused"].as_bool()),
        (Some("mail"), Some(false))
    );
    let (ok, out, _) = hopper(&db, &["queues", "list"]);
    assert!(
        ok && out.contains("MAX RUNNING") && out.contains("mail"),
        "{out}"
    );

    let (ok, _, err) = hopper(&db, &["queues", "limit", "mail", "--rate", "fast"]);
    assert!(!ok && err.contains("100/s"), "{err}");
    let (ok, _, err) = hopper(&db, &["queues", "pause", "bad name"]);
    assert!(!ok && err.starts_with("error: "), "{err}");
    let off = json(
        &db,
        &["--json", "queues", "limit", "mail", "--concurrency", "off"],
    );
    assert_eq!(off["max_running"], Value::Null);
    Ok(())
}

#[tokio::test]
async fn enqueue_with_group_and_unique_key() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let args = [
        "--json",
        "enqueue",
        "--kind",
        "sync",
        "--group",
        "acme",
        "--unique-key",
        "sync:acme",
    ];
    let first = json(&db, &args)["id"].clone();
    let second = json(&db, &args)["id"].clone();
    assert_eq!(first, second, "the key's holder is printed");
    let mut rejecting = args.to_vec();
    rejecting.extend(["--unique-policy", "reject"]);
    // Under --json the error is a JSON object on stdout.
    let (ok, out, _) = hopper(&db, &rejecting);
    let error: serde_json::Value = serde_json::from_str(&out)?;
    assert!(!ok && error["error"]["code"] == "conflict", "{out}");
    let list = json(&db, &["--json", "queues", "list"]);
    assert_eq!(list["queues"][0]["grouped"], true);
    Ok(())
}

#[tokio::test]
async fn cancel_a_running_job_and_list_cron() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let backend = db.backend();
    let id = hopper::Client::new(backend.clone())
        .insert(NewJob::new("long", serde_json::json!({})))
        .await?;
    backend
        .job_claim(&ClaimParams {
            queue: "default".into(),
            node: uuid::Uuid::now_v7(),
            limit: 1,
            lease: Duration::from_secs(60),
            kinds: None,
        })
        .await?;
    let cancelled = json(&db, &["--json", "jobs", "cancel", &id.to_string()]);
    assert_eq!(cancelled["state"], "cancelled");
    assert_eq!(
        backend
            .job_get(&JobGetParams { id })
            .await?
            .map(|j| j.state),
        Some(JobState::Cancelled)
    );

    let nightly = PeriodicJob::new(
        "nightly",
        "0 3 * * *",
        NewJob::new("report", serde_json::json!({})),
    )?
    .with_timezone("Europe/Paris")?;
    let handle = Runtime::new(backend, Workers::new(), RuntimeConfig::default())
        .periodic(nightly)
        .start()
        .await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let entries = loop {
        let listed = json(&db, &["--json", "cron", "list"]);
        if listed["periodic_jobs"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
        {
            break listed;
        }
        assert!(tokio::time::Instant::now() < deadline, "never registered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    handle.shutdown().await;
    let entry = &entries["periodic_jobs"][0];
    assert_eq!(
        (entry["name"].as_str(), entry["timezone"].as_str()),
        (Some("nightly"), Some("Europe/Paris"))
    );
    let (ok, out, _) = hopper(&db, &["cron", "list"]);
    assert!(ok && out.contains("0 3 * * *"), "{out}");
    Ok(())
}

/// `hopper nodes`: a running runtime is listed with its name, queues and concurrency, in
/// text and in JSON; once it stopped (deregistered), no node is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_lists_the_running_runtimes() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (ok, out, _) = hopper(&db, &["nodes"]);
    assert!(ok && out.contains("no nodes"), "{out}");
    let config = RuntimeConfig::default()
        .with_queues(["mail", "pdf"])
        .with_concurrency(7)
        .with_node_name("listed-node");
    let handle = Runtime::new(db.backend(), Workers::new(), config)
        .start()
        .await?;
    let listed = json(&db, &["--json", "nodes"]);
    let node = &listed["nodes"][0];
    assert_eq!(node["name"], "listed-node", "{listed}");
    assert_eq!(node["queues"], serde_json::json!(["mail", "pdf"]));
    assert_eq!(node["concurrency"], 7);
    let (ok, out, _) = hopper(&db, &["nodes"]);
    assert!(
        ok && out.contains("listed-node") && out.contains("mail,pdf"),
        "{out}"
    );
    handle.shutdown().await;
    assert_eq!(
        json(&db, &["--json", "nodes"]),
        serde_json::json!({"nodes": [], "next_before": null})
    );
    Ok(())
}
