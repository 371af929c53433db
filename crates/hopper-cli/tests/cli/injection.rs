//! SQL injection through the `hopper` binary's arguments: names are refused with a clear
//! one-line error, unique keys and arguments are stored verbatim, and the schema is intact.

use std::process::{Command, Stdio};

use hopper::testing::TestDatabase;
use hopper::{JobListParams, JobState};

const HOSTILE: [&str; 4] = [
    "default' OR '1'='1",
    "'; DROP TABLE jobs; --",
    "x\"; DELETE FROM jobs; --",
    "k) OR (1=1",
];

/// Runs `hopper args…` against `db`'s schema: (success, stdout, stderr).
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

fn refused(db: &TestDatabase, args: &[&str], needle: &str) {
    let (ok, _, stderr) = hopper(db, args);
    assert!(!ok, "{args:?} succeeded");
    assert!(
        stderr.starts_with("error: ") && stderr.contains(needle),
        "{args:?}: {stderr}"
    );
}

#[tokio::test]
async fn hostile_arguments_are_refused_or_stored_verbatim() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (ok, _, stderr) = hopper(&db, &["enqueue", "--kind", "canary"]);
    assert!(ok, "{stderr}");
    for s in HOSTILE {
        refused(&db, &["enqueue", "--kind", "k", "--queue", s], "queue");
        refused(&db, &["enqueue", "--kind", s], "kind");
        refused(&db, &["enqueue", "--kind", "k", "--group", s], "group");
        refused(&db, &["queues", "pause", s], "queue");
        refused(&db, &["jobs", "show", s], "job id");
        let (ok, stdout, stderr) = hopper(&db, &["jobs", "list", "--queue", s, "--json"]);
        assert!(
            !ok || stdout.trim() == "[]",
            "{s:?} listed something: {stdout} {stderr}"
        );
        let args = serde_json::json!({ "s": s }).to_string();
        let (ok, _, stderr) = hopper(
            &db,
            &[
                "enqueue",
                "--kind",
                "k",
                "--queue",
                "keys",
                "--unique-key",
                s,
                "--args",
                &args,
            ],
        );
        assert!(ok, "{s:?}: {stderr}");
    }
    let all = JobListParams {
        limit: 100,
        ..JobListParams::default()
    };
    let jobs = db.backend().job_list(&all).await?;
    assert_eq!(jobs.len(), HOSTILE.len() + 1, "{jobs:?}");
    for s in HOSTILE {
        let job = jobs
            .iter()
            .find(|j| j.unique_key.as_deref() == Some(s))
            .ok_or_else(|| anyhow::anyhow!("{s:?} not stored verbatim"))?;
        assert_eq!(job.args, serde_json::json!({ "s": s }));
        assert_eq!(job.state, JobState::Available);
    }
    Ok(())
}
