//! The `hopper` binary, run as a user runs it, against the real PostgreSQL.
//!
//! Each test gets its own schema from [`TestDatabase`] (dropped when the test ends) and
//! points the binary at it with `DATABASE_URL` and `HOPPER_SCHEMA`.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use hopper::backend::{ClaimParams, Finish, FinishResult, Outcome};
use hopper::testing::TestDatabase;
use hopper::{JobListParams, JobState};
use serde_json::Value;

/// What one run of the binary printed, and how it exited.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) success: bool,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    /// Asserts success and returns stdout.
    pub(crate) fn ok(self) -> String {
        assert!(self.success, "hopper failed: {self:?}");
        self.stdout
    }

    /// Asserts success and parses stdout as JSON.
    pub(crate) fn json(self) -> Value {
        let stdout = self.ok();
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
    }

    /// Asserts a non-zero exit with a one-line error that contains `needle`.
    pub(crate) fn fails_with(self, needle: &str) {
        assert!(
            !self.success,
            "hopper succeeded but should not have: {self:?}"
        );
        let message = self.stderr.trim_end();
        assert_eq!(
            message.lines().count(),
            1,
            "error is not one line: {message:?}"
        );
        assert!(
            message.starts_with("error: "),
            "unexpected error: {message:?}"
        );
        assert!(
            message.contains(needle),
            "error {message:?} does not say {needle:?}"
        );
    }
}

/// Runs `hopper args…` (with `stdin`, when given) against `db`'s schema.
fn hopper_with_stdin(db: &TestDatabase, args: &[&str], stdin: Option<&[u8]>) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hopper"));
    command
        .args(args)
        .env("DATABASE_URL", db.url())
        .env("HOPPER_SCHEMA", db.schema())
        .env_remove("HOPPER_LOG")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("the hopper binary starts");
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // The binary may refuse the input before reading all of it; a broken pipe is fine.
        let _ = pipe.write_all(input);
    }
    let output = child.wait_with_output().expect("the hopper binary runs");
    Run {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

pub(crate) fn hopper(db: &TestDatabase, args: &[&str]) -> Run {
    hopper_with_stdin(db, args, None)
}

/// Every job in the schema.
async fn all_jobs(db: &TestDatabase) -> Vec<hopper::JobRecord> {
    let params = JobListParams {
        limit: 1000,
        ..JobListParams::default()
    };
    db.backend().job_list(&params).await.expect("jobs list")
}

#[tokio::test]
async fn migrate_twice_on_a_fresh_schema() {
    let db = TestDatabase::new().await.expect("test database");
    let pg = db.pg().pool().get().await.expect("connection");
    pg.batch_execute(&format!("DROP SCHEMA {} CASCADE", db.schema()))
        .await
        .expect("drop the schema TestDatabase made");
    drop(pg);

    let first = hopper(&db, &["migrate"]).ok();
    assert!(first.contains(db.schema()), "{first}");
    assert!(first.contains("applied migration 0001_"), "{first}");
    let second = hopper(&db, &["migrate", "--json"]).json();
    assert_eq!(
        second,
        serde_json::json!({ "migrated": true, "schema": db.schema(), "applied": [] })
    );
    let third = hopper(&db, &["migrate"]).ok();
    assert!(!third.contains("applied migration"), "{third}");
    assert!(all_jobs(&db).await.is_empty());
}

#[tokio::test]
async fn enqueue_show_cancel_retry() {
    let db = TestDatabase::new().await.expect("test database");
    let id = hopper(
        &db,
        &[
            "enqueue",
            "--queue",
            "mail",
            "--kind",
            "send_email",
            "--args",
            r#"{"to": "ada@example.com"}"#,
            "--priority",
            "high",
            "--delay",
            "1h",
            "--max-attempts",
            "5",
            "--timeout",
            "30s",
        ],
    )
    .ok();
    let id = id.trim();
    assert!(uuid::Uuid::parse_str(id).is_ok(), "not an id: {id:?}");

    let job = hopper(&db, &["jobs", "show", id, "--json"]).json();
    assert_eq!(job["id"], id);
    assert_eq!(job["queue"], "mail");
    assert_eq!(job["kind"], "send_email");
    assert_eq!(job["args"]["to"], "ada@example.com");
    assert_eq!(job["state"], "scheduled");
    assert_eq!(job["priority"], 1);
    assert_eq!(job["max_attempts"], 5);
    assert_eq!(job["timeout_ms"], 30_000);
    let run_at: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(job["run_at"].clone()).expect("run_at is a time");
    let ahead = run_at - chrono::Utc::now();
    assert!(
        ahead > chrono::Duration::minutes(59) && ahead <= chrono::Duration::hours(1),
        "run_at is {ahead} away"
    );
    let text = hopper(&db, &["jobs", "show", id]).ok();
    for expected in ["send_email", "scheduled", "high", "errors", "none"] {
        assert!(
            text.contains(expected),
            "{expected:?} missing from:\n{text}"
        );
    }

    hopper(&db, &["jobs", "retry", id])
        .fails_with("is scheduled; only failed or cancelled jobs can be retried");
    assert!(
        hopper(&db, &["jobs", "cancel", id])
            .ok()
            .contains("cancelled")
    );
    hopper(&db, &["jobs", "cancel", id]).fails_with("is cancelled");
    let retried = hopper(&db, &["jobs", "retry", id, "--json"]).json();
    assert_eq!(retried["state"], "available");

    let listed = hopper(&db, &["jobs", "list", "--queue", "mail", "--json"]).json();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["id"], id);
    let table = hopper(&db, &["jobs", "list", "--state", "available"]).ok();
    assert!(
        table.contains(id) && table.contains("send_email"),
        "{table}"
    );
    let none = hopper(&db, &["jobs", "list", "--state", "failed", "--json"]).json();
    assert_eq!(none, serde_json::json!([]));

    let missing = uuid::Uuid::now_v7().to_string();
    hopper(&db, &["jobs", "show", &missing]).fails_with("not found");
    hopper(&db, &["jobs", "retry", &missing]).fails_with("not found");
    hopper(&db, &["jobs", "cancel", &missing]).fails_with("not found");
    hopper(&db, &["jobs", "show", "42"]).fails_with("invalid job id");
    hopper(&db, &["jobs", "cancel", "not-an-id"]).fails_with("invalid job id");
}

#[tokio::test]
async fn jobs_show_group_and_unique_key_and_list_filters_by_group() {
    let db = TestDatabase::new().await.expect("test database");
    let enqueue = |group: &str, key: &str| {
        let mut args = vec![
            "enqueue", "--queue", "t", "--kind", "sync", "--group", group,
        ];
        if !key.is_empty() {
            args.extend(["--unique-key", key]);
        }
        hopper(&db, &args).ok().trim().to_owned()
    };
    let keyed = enqueue("tenant-7", "sync:tenant-7");
    let other = enqueue("tenant-8", "");

    let job = hopper(&db, &["jobs", "show", &keyed, "--json"]).json();
    assert_eq!(job["group"], "tenant-7");
    assert_eq!(job["unique_key"], "sync:tenant-7");
    let text = hopper(&db, &["jobs", "show", &keyed]).ok();
    assert!(
        text.contains("tenant-7") && text.contains("sync:tenant-7"),
        "{text}"
    );

    let listed = hopper(&db, &["jobs", "list", "--group", "tenant-8", "--json"]).json();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["id"], other.as_str());
    let table = hopper(&db, &["jobs", "list"]).ok();
    assert!(
        table.contains("GROUP") && table.contains("tenant-8"),
        "{table}"
    );
    hopper(&db, &["jobs", "list", "--group", "a b"]).fails_with("group name");
}

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[tokio::test]
async fn enqueue_meta_and_traceparent_show_and_filter() {
    let db = TestDatabase::new().await.expect("test database");
    let acme = hopper(
        &db,
        &[
            "enqueue",
            "--kind",
            "k",
            "--meta",
            r#"{"tenant":"acme","n":1}"#,
            "--traceparent",
            TRACEPARENT,
        ],
    )
    .ok()
    .trim()
    .to_owned();
    let other = hopper(
        &db,
        &["enqueue", "--kind", "k", "--meta", r#"{"tenant":"globex"}"#],
    )
    .ok()
    .trim()
    .to_owned();
    let job = hopper(&db, &["jobs", "show", &acme, "--json"]).json();
    assert_eq!(
        job["meta"],
        serde_json::json!({"tenant": "acme", "n": 1, "traceparent": TRACEPARENT})
    );
    let text = hopper(&db, &["jobs", "show", &acme]).ok();
    assert!(
        text.contains("meta") && text.contains(TRACEPARENT),
        "{text}"
    );

    let listed = hopper(
        &db,
        &["jobs", "list", "--meta", r#"{"tenant":"globex"}"#, "--json"],
    )
    .json();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["id"], other.as_str());
    let none = hopper(
        &db,
        &["jobs", "list", "--meta", r#"{"tenant":"x"}"#, "--json"],
    )
    .json();
    assert_eq!(none.as_array().map(Vec::len), Some(0), "{none}");

    hopper(&db, &["enqueue", "--kind", "k", "--meta", "[1]"])
        .fails_with("--meta: meta must be a JSON object");
    hopper(&db, &["enqueue", "--kind", "k", "--meta", "{"])
        .fails_with("--meta: meta is not valid JSON");
    let huge = format!(r#"{{"blob":"{}"}}"#, "x".repeat(17_000));
    hopper(&db, &["enqueue", "--kind", "k", "--meta", &huge])
        .fails_with("over the limit of 16384 bytes");
    hopper(&db, &["enqueue", "--kind", "k", "--traceparent", "00-xyz"]).fails_with("--traceparent");
    hopper(&db, &["jobs", "list", "--meta", r#"{"a":{"b":1}}"#])
        .fails_with("top-level values only");
    assert_eq!(
        all_jobs(&db).await.len(),
        2,
        "refused enqueues wrote nothing"
    );
}

/// Claims the one job of the default queue and stores one log line for its attempt, with
/// `dropped` lines said to be left out; the attempt's lease.
async fn claim_and_log(
    db: &TestDatabase,
    (level, message, fields): (
        hopper::core::job_log::LogLevel,
        &str,
        serde_json::Map<String, Value>,
    ),
    dropped: i64,
) -> hopper::core::Lease {
    use hopper::core::job_log::{JobLogAppend, LogLine};
    let backend = db.backend();
    let claimed = backend
        .job_claim(&ClaimParams {
            queue: "default".into(),
            node: uuid::Uuid::now_v7(),
            limit: 1,
            lease: Duration::from_secs(60),
            kinds: None,
        })
        .await
        .expect("claim");
    let lease = claimed[0].lease;
    let store = backend.logs().expect("PostgreSQL keeps logs");
    store
        .job_log_append(&[JobLogAppend {
            lease,
            lines: vec![LogLine {
                at: chrono::Utc::now(),
                level,
                message: message.into(),
                fields,
            }],
            dropped,
        }])
        .await
        .expect("append");
    lease
}

#[tokio::test]
async fn jobs_show_prints_each_attempts_log_and_the_truncation_marker() {
    use hopper::core::job_log::LogLevel;
    let db = TestDatabase::new().await.expect("test database");
    let id = hopper(&db, &["enqueue", "--kind", "k"])
        .ok()
        .trim()
        .to_owned();
    let fields = serde_json::from_value(serde_json::json!({"rows": 3})).expect("a map");
    let line = (LogLevel::Warn, "line one\nwith a newline", fields);
    claim_and_log(&db, line, 9).await;
    let text = hopper(&db, &["jobs", "show", &id]).ok();
    assert!(text.contains("log of attempt 1:"), "{text}");
    assert!(
        text.contains("warn  line one\\nwith a newline {\"rows\":3}"),
        "{text}"
    );
    assert!(text.contains("[truncated: 9 more lines dropped"), "{text}");
    let json = hopper(&db, &["jobs", "show", &id, "--json"]).json();
    assert_eq!(json["logs"][0]["dropped"], 9);
    assert_eq!(json["logs"][0]["lines"][0]["fields"]["rows"], 3);

    // The same through `hopper serve` (the `job_logs` request).
    let dir = std::env::temp_dir().join(format!("hopper-cli-logs-{}", uuid::Uuid::now_v7()));
    let (_server, url) = serve(&db, &dir);
    let remote = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_hopper"))
            .args(args)
            .env("DATABASE_URL", &url)
            .env_remove("HOPPER_LOG")
            .stdin(Stdio::null())
            .output()
            .expect("the hopper binary runs");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let through = remote(&["jobs", "show", &id]);
    assert!(through.contains("log of attempt 1:"), "{through}");
    assert!(
        through.contains("[truncated: 9 more lines dropped"),
        "{through}"
    );
    let through: Value =
        serde_json::from_str(&remote(&["jobs", "show", &id, "--json"])).expect("JSON");
    assert_eq!(through["logs"], json["logs"], "what the database holds");
    let _ = std::fs::remove_dir_all(dir);
}

/// Text that others stored (a handler's error, a log line and its fields, a node's name)
/// with terminal escape sequences, tabs, C1 controls and a bidirectional override is
/// printed with those as escapes: an operator's terminal is not cleared, retitled or
/// recoloured, and rows stay rows. (A log line's fields are printed as JSON, which
/// escapes C0 controls but not C1 controls nor bidirectional overrides.)
#[tokio::test]
async fn stored_text_is_printed_inert() {
    use hopper::core::job_log::LogLevel;
    const HOSTILE: &str = "\u{1b}]0;owned\u{7}\u{1b}[2J\u{1b}[31mred\ttab\rback\u{202e}desrever";
    const SHOWN: &str =
        "\\u{1b}]0;owned\\u{7}\\u{1b}[2J\\u{1b}[31mred\\ttab\\rback\\u{202e}desrever";
    let db = TestDatabase::new().await.expect("test database");
    let id = hopper(&db, &["enqueue", "--kind", "k", "--max-attempts", "1"])
        .ok()
        .trim()
        .to_owned();
    let backend = db.backend();
    let fields = serde_json::json!({ "note": format!("{HOSTILE}\u{9b}2J") });
    let fields = serde_json::from_value(fields).expect("a map");
    let lease = claim_and_log(&db, (LogLevel::Info, HOSTILE, fields), 0).await;
    backend
        .job_finish_many(&[Finish {
            lease,
            outcome: Outcome::Retry {
                error: HOSTILE.to_owned(),
                retry_in: Duration::ZERO,
                duration_ms: 1,
            },
        }])
        .await
        .expect("finish");
    backend
        .node_heartbeat(&hopper::backend::NodeInfo {
            id: uuid::Uuid::now_v7(),
            name: HOSTILE.to_owned(),
            queues: vec!["default".into()],
            concurrency: 1,
        })
        .await
        .expect("a node");

    let inert = |c: char| c == '\n' || !(c.is_control() || ('\u{202a}'..='\u{2069}').contains(&c));
    for args in [vec!["jobs", "show", id.as_str()], vec!["nodes"]] {
        let text = hopper(&db, &args).ok();
        assert!(text.chars().all(inert), "{args:?} printed raw: {text:?}");
        // Shown twice on the job's page (its log line and its error), once among nodes.
        let times = if args[0] == "jobs" { 2 } else { 1 };
        assert_eq!(text.matches(SHOWN).count(), times, "{args:?}: {text}");
    }
    // JSON keeps the text as it is stored (its strings escape control characters).
    let json = hopper(&db, &["jobs", "show", &id, "--json"]).json();
    assert_eq!(json["errors"][0]["error"], HOSTILE);
}

/// Starts `hopper serve` on `db`'s schema on a free loopback port, its token in `dir`;
/// returns it (killed when dropped) and the URL, with the admin token it generated, to
/// reach it.
pub(crate) fn serve(db: &TestDatabase, dir: &std::path::Path) -> (crate::common::Hopper, String) {
    let token_file = dir.join("serve.token");
    let token_file = token_file.to_str().expect("a UTF-8 path");
    let args = [
        "serve",
        "--listen",
        "tcp://127.0.0.1:0",
        "--token-file",
        token_file,
    ];
    let serving = crate::common::Hopper::start(db, "", &args).expect("hopper serve starts");
    let line = serving
        .line_with("listening on ", Duration::from_secs(60))
        .expect("hopper serve says where it listens");
    let endpoint = crate::common::serve_endpoint(&line).expect("an endpoint");
    let tokens = std::fs::read_to_string(dir.join("serve.token")).expect("the token file");
    let token = tokens
        .lines()
        .find(|l| !l.starts_with('#') && !l.is_empty())
        .expect("a token")
        .trim()
        .to_owned();
    (serving, format!("{endpoint}?token={token}"))
}

#[tokio::test]
async fn show_prints_the_error_history_and_retry_revives_a_failed_job() {
    let db = TestDatabase::new().await.expect("test database");
    let enqueued = hopper(
        &db,
        &[
            "enqueue",
            "--kind",
            "flaky",
            "--max-attempts",
            "1",
            "--json",
        ],
    )
    .json();
    let id = enqueued["id"].as_str().expect("an id").to_owned();

    // Fail its one attempt through the storage seam, as a worker would.
    let backend = db.backend();
    let claimed = backend
        .job_claim(&ClaimParams {
            queue: "default".to_owned(),
            node: uuid::Uuid::now_v7(),
            limit: 1,
            lease: Duration::from_secs(30),
            kinds: None,
        })
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1);
    let finished = backend
        .job_finish_many(&[Finish {
            lease: claimed[0].lease,
            outcome: Outcome::Retry {
                error: "smtp said no".to_owned(),
                retry_in: Duration::ZERO,
                duration_ms: 42,
            },
        }])
        .await
        .expect("finish");
    assert_eq!(finished, [FinishResult::Recorded(JobState::Failed)]);

    let job = hopper(&db, &["jobs", "show", &id, "--json"]).json();
    assert_eq!(job["state"], "failed");
    assert_eq!(job["errors"][0]["attempt"], 1);
    assert_eq!(job["errors"][0]["error"], "smtp said no");
    assert_eq!(job["errors"][0]["duration_ms"], 42);
    let text = hopper(&db, &["jobs", "show", &id]).ok();
    for expected in ["failed", "errors (1)", "smtp said no", "42 ms"] {
        assert!(
            text.contains(expected),
            "{expected:?} missing from:\n{text}"
        );
    }

    let retried = hopper(&db, &["jobs", "retry", &id]).ok();
    assert!(retried.contains("available"), "{retried}");
    hopper(&db, &["jobs", "retry", &id])
        .fails_with("is available; only failed or cancelled jobs can be retried");
}

#[tokio::test]
async fn bad_input_is_refused_and_writes_nothing() {
    let db = TestDatabase::new().await.expect("test database");
    let cases: &[(&[&str], &str)] = &[
        (&["--args", "{not json"], "--args is not valid JSON"),
        (&["--args", "3"], "args must be a JSON object or array"),
        (
            &["--args", r#"{"id": [123456789012345678901]}"#],
            "--args: args.id[0]: the integer 123456789012345678901 does not fit in 64 bits",
        ),
        (
            &["--meta", r#"{"n": -9223372036854775809}"#],
            "--meta: meta.n: the integer -9223372036854775809 does not fit in 64 bits",
        ),
        (&["--args", "@/nonexistent/args.json"], "cannot read --args"),
        (&["--queue", "it's"], "queue name"),
        (&["--queue", "q;drop table jobs"], "queue name"),
        (&["--queue", "a\"b"], "queue name"),
        (&["--kind", "two words"], "kind name"),
        (&["--priority", "urgent"], "unknown priority"),
        (&["--priority", "40000"], "unknown priority"),
        (&["--delay", "soon"], "--delay \"soon\" is not a duration"),
        (
            &["--timeout", "forever"],
            "--timeout \"forever\" is not a duration",
        ),
        (&["--timeout", "0s"], "timeout must be between"),
        (
            &["--run-at", "tomorrow"],
            "--run-at \"tomorrow\" is not an RFC 3339 time",
        ),
        (&["--max-attempts", "0"], "max_attempts must be at least 1"),
    ];
    for (extra, needle) in cases {
        let mut args = vec!["enqueue"];
        if !extra.contains(&"--kind") {
            args.extend(["--kind", "k"]);
        }
        args.extend_from_slice(extra);
        hopper(&db, &args).fails_with(needle);
    }

    // Over 1 MiB: too long for one command-line argument, so it comes on stdin.
    let big = format!(
        r#"{{"blob": "{}"}}"#,
        "x".repeat(hopper::core::MAX_ARGS_BYTES)
    );
    hopper_with_stdin(
        &db,
        &["enqueue", "--kind", "k", "--args", "-"],
        Some(big.as_bytes()),
    )
    .fails_with("over the limit of 1048576 bytes");

    hopper(&db, &["jobs", "list", "--state", "done"]).fails_with("unknown state");
    assert!(all_jobs(&db).await.is_empty(), "bad input wrote a job");

    // The same input read from stdin, when it is fine, is accepted.
    hopper_with_stdin(
        &db,
        &["enqueue", "--kind", "k", "--args", "-"],
        Some(br#"{"ok": true}"#),
    )
    .ok();
    assert_eq!(all_jobs(&db).await.len(), 1);
}

/// `hopper ARGS` on `db`'s schema through `sh`, `shell` run first, killed past 20 s; its
/// stdin is given to `feed` and stays open until the process has ended.
fn run_fed_within_20s(
    db: &TestDatabase,
    shell: &str,
    args: &[&str],
    feed: impl FnOnce(std::process::ChildStdin) + Send + 'static,
) -> anyhow::Result<Run> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("{shell}\nexec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_hopper"))
        .args(args)
        .env("DATABASE_URL", db.url())
        .env("HOPPER_SCHEMA", db.schema())
        .env_remove("HOPPER_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdin"))?;
    let (held, hold) = std::sync::mpsc::channel::<()>();
    // The writer keeps stdin open until the test is done with the process.
    let writer = std::thread::spawn(move || {
        feed(stdin);
        let _ = hold.recv();
    });
    let started = std::time::Instant::now();
    while child.try_wait()?.is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            drop(held);
            let _ = writer.join();
            anyhow::bail!("{args:?} did not end within 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output()?;
    drop(held);
    let _ = writer.join();
    Ok(Run {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// `--args @FILE` and `--args -` read only just past the 1 MiB limit of job arguments: an
/// input with no end (`/dev/zero`, a pipe its writer keeps open) is refused at the limit,
/// naming it, rather than read until memory runs out. (Under a 1.5 GB address space, so
/// that a binary reading without bound fails fast instead of eating the machine's memory.)
#[tokio::test]
async fn args_from_an_endless_input_are_refused_at_the_limit() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let limit = "ulimit -v 1500000";
    let args = ["enqueue", "--kind", "k", "--args", "@/dev/zero"];
    run_fed_within_20s(&db, limit, &args, drop)?
        .fails_with("--args from /dev/zero is over the limit of 1048576 bytes");
    let args = ["enqueue", "--kind", "k", "--args", "-"];
    let two_mib = |mut stdin: std::process::ChildStdin| {
        let mut chunk = br#"{"blob": ""#.to_vec();
        chunk.resize(64 * 1024, b'x');
        for _ in 0..32 {
            // The binary stops reading at the limit: a broken pipe is the point.
            if stdin.write_all(&chunk).is_err() {
                return;
            }
            chunk.fill(b'x');
        }
    };
    run_fed_within_20s(&db, limit, &args, two_mib)?
        .fails_with("--args from stdin is over the limit of 1048576 bytes");
    assert!(all_jobs(&db).await.is_empty(), "a job was written");
    Ok(())
}

#[tokio::test]
async fn stats_json_has_the_documented_shape() {
    let db = TestDatabase::new().await.expect("test database");
    assert_eq!(
        hopper(&db, &["stats", "--json"]).json(),
        serde_json::json!({ "queues": [] })
    );
    hopper(&db, &["enqueue", "--kind", "k"]).ok();
    hopper(&db, &["enqueue", "--kind", "k"]).ok();
    let later = hopper(
        &db,
        &["enqueue", "--queue", "mail", "--kind", "k", "--delay", "1h"],
    )
    .ok();
    hopper(&db, &["jobs", "cancel", later.trim()]).ok();
    hopper(
        &db,
        &["enqueue", "--queue", "mail", "--kind", "k", "--delay", "1h"],
    )
    .ok();

    let run = hopper(&db, &["stats", "--json"]);
    let raw = run.stdout.clone();
    let stats = run.json();
    let fields = [
        "queue",
        "available",
        "scheduled",
        "running",
        "completed",
        "failed",
        "cancelled",
        "oldest_available_secs",
    ];
    let queues = stats["queues"].as_array().expect("queues is an array");
    assert_eq!(queues.len(), 2, "{stats}");
    for queue in queues {
        let keys: Vec<&str> = queue
            .as_object()
            .expect("each queue is an object")
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected = fields.to_vec();
        expected.sort_unstable();
        let mut keys = keys;
        keys.sort_unstable();
        assert_eq!(keys, expected);
        assert!(queue["oldest_available_secs"].is_f64(), "{queue}");
    }
    // Fields come in the documented order.
    let positions: Vec<usize> = fields
        .iter()
        .map(|f| raw.find(&format!("\"{f}\"")).expect("field present"))
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{raw}");

    let default = &queues[0];
    assert_eq!(default["queue"], "default");
    assert_eq!(default["available"], 2);
    assert!(
        default["oldest_available_secs"]
            .as_f64()
            .is_some_and(|s| s >= 0.0)
    );
    let mail = &queues[1];
    assert_eq!(mail["queue"], "mail");
    assert_eq!(mail["scheduled"], 1);
    assert_eq!(mail["cancelled"], 1);
    assert_eq!(mail["available"], 0);
    assert_eq!(mail["oldest_available_secs"], 0.0);

    let table = hopper(&db, &["stats"]).ok();
    assert!(table.starts_with("QUEUE"), "{table}");
    assert!(table.contains("mail"), "{table}");
}

#[tokio::test]
async fn demo_runs_500_jobs_and_reports_459_completed_41_failed() {
    let db = TestDatabase::new().await.expect("test database");
    let summary = hopper(&db, &["demo", "--jobs", "500", "--json"]).json();
    assert_eq!(summary["completed"], 459, "{summary}");
    assert_eq!(summary["failed"], 41, "{summary}");
    assert_eq!(summary["attempts"], 459 + 41 * 3, "{summary}");
    let avg = summary["avg_duration_ms"]
        .as_f64()
        .expect("avg_duration_ms");
    assert!((100.0..200.0).contains(&avg), "{summary}");
    let seconds = summary["seconds"].as_f64().expect("seconds");
    assert!(seconds < 10.0, "the demo took {seconds} s");

    // The jobs stay in the run's own queue, for a look after the demo.
    let queue = summary["queue"]
        .as_str()
        .expect("the run's queue")
        .to_owned();
    assert!(queue.starts_with("demo-"), "{summary}");
    let stats = db.queue_stats(&queue).await.expect("stats");
    assert_eq!((stats.completed, stats.failed), (459, 41));
    let failed = all_jobs(&db).await;
    let failed: Vec<_> = failed
        .iter()
        .filter(|j| j.state == JobState::Failed)
        .collect();
    assert!(failed.iter().all(|j| j.errors.len() == 3 && j.attempt == 3));

    // A second run clears the first one's jobs (that run has ended) rather than adding to
    // them.
    let again = hopper(&db, &["demo", "--jobs", "24", "--json"]).json();
    assert_eq!(
        (again["completed"].as_u64(), again["failed"].as_u64()),
        (Some(22), Some(2))
    );
    assert_ne!(again["queue"], summary["queue"]);
    let first = db.queue_stats(&queue).await.expect("stats");
    assert_eq!((first.completed, first.failed), (0, 0), "{first:?}");
    let text = hopper(&db, &["demo", "--jobs", "12"]).ok();
    assert!(text.contains("demo: 12 jobs on queue \"demo-"), "{text}");
    assert!(text.contains("completed  11"), "{text}");
    assert!(text.contains("failed     1 (3 attempts each)"), "{text}");
}
