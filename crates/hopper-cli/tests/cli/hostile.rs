//! The hostile-input suite: what a careless or malicious user feeds the real `hopper`
//! binary and the real `hopper serve --http`, against the real PostgreSQL.
//!
//! For every input: a clear error (one line, or a JSON object under `--json`), nothing
//! written, nothing stuck, and the process still serving. Each surface adds its cases
//! here (see docs/testing.md, "The hostile-input suite").

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper::testing::TestDatabase;
use hopper::{JobListParams, NewJob};
use serde_json::Value;

/// How a run of the binary ended.
#[derive(Debug)]
struct Exit {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn command(db: &TestDatabase, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hopper"));
    command
        .args(args)
        .env("DATABASE_URL", db.url())
        .env("HOPPER_SCHEMA", db.schema())
        .env_remove("HOPPER_LOG")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn run(db: &TestDatabase, args: &[&str]) -> Exit {
    exit_of(&mut command(db, args))
}

/// Runs `command` to its end.
fn exit_of(command: &mut Command) -> Exit {
    let output = command.output().expect("the hopper binary runs");
    Exit {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Asserts a refusal in text: status 1 or 2, one `error:` line on stderr naming `needle`.
fn refused(exit: &Exit, needle: &str) {
    assert!(matches!(exit.code, Some(1 | 2)), "{exit:?}");
    let first = exit.stderr.lines().next().unwrap_or("");
    assert!(first.starts_with("error: "), "{exit:?}");
    assert!(first.contains(needle), "{needle:?} not in {first:?}");
    assert!(!exit.stderr.contains("panicked"), "{exit:?}");
    assert!(first.len() < 1000, "a {} byte error line", first.len());
}

/// Asserts a refusal under `--json`: a JSON error object on stdout with `code`.
fn refused_json(exit: &Exit, code: &str) -> Value {
    assert!(matches!(exit.code, Some(1 | 2)), "{exit:?}");
    let value: Value = serde_json::from_str(exit.stdout.trim())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {exit:?}"));
    assert_eq!(value["error"]["code"], code, "{value}");
    assert!(
        value["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );
    value
}

/// True when no queue has settings (nothing was paused or limited).
async fn no_queue_settings(db: &TestDatabase) -> bool {
    let client = hopper::Client::new(db.backend());
    client.queues().await.expect("queues").is_empty()
}

async fn job_count(db: &TestDatabase) -> usize {
    let params = JobListParams {
        limit: 100_000,
        ..JobListParams::default()
    };
    db.backend().job_list(&params).await.expect("jobs").len()
}

#[tokio::test]
async fn hostile_names_json_and_times_are_refused_and_write_nothing() {
    let db = TestDatabase::new().await.expect("test database");
    let long = "q".repeat(100_000);
    for queue in [
        "a b",
        "'; DROP TABLE jobs; --",
        "\u{1b}[31mred",
        "tab\there",
        &long,
    ] {
        let exit = run(&db, &["enqueue", "--kind", "k", "--queue", queue]);
        refused(&exit, "queue");
        let exit = run(&db, &["queues", "pause", queue, "--create"]);
        refused(&exit, "queue");
    }
    for args in ["{", "not json", "[1,", "\"unterminated"] {
        refused(
            &run(&db, &["enqueue", "--kind", "k", "--args", args]),
            "not valid JSON",
        );
    }
    // Over 1 MiB: from a file (one command-line argument may not be that long).
    let fat = std::env::temp_dir().join(format!("hopper-hostile-{}.json", std::process::id()));
    std::fs::write(&fat, format!(r#"{{"blob": "{}"}}"#, "x".repeat(1 << 20))).expect("temp file");
    let from_file = format!("@{}", fat.display());
    refused(
        &run(&db, &["enqueue", "--kind", "k", "--args", &from_file]),
        "over the limit",
    );
    let _ = std::fs::remove_file(&fat);
    for at in [
        "infinity",
        "-infinity",
        "99999-01-01T00:00:00Z",
        "yesterday",
    ] {
        refused(
            &run(&db, &["enqueue", "--kind", "k", &format!("--run-at={at}")]),
            "--run-at",
        );
    }
    for delay in ["9999999999999999999999s", "-5s", "soon"] {
        let flag = format!("--delay={delay}");
        refused(&run(&db, &["enqueue", "--kind", "k", &flag]), "--delay");
    }
    refused(&run(&db, &["jobs", "show", "not-a-uuid"]), "invalid job id");
    refused(&run(&db, &["jobs", "list", "--limit", "0"]), "0");
    for limit in ["0", "-1", "99999999999", "ten"] {
        refused(&run(&db, &["nodes", &format!("--limit={limit}")]), limit);
    }
    let long = "A".repeat(100_000) + "!";
    for cursor in ["zzz", "", "0190f3c2-0000-7000-8000-000000000000", &long] {
        let flag = format!("--before={cursor}");
        refused(&run(&db, &["nodes", &flag]), "--before");
        refused(
            &run(&db, &["nodes", &flag]),
            "is not a cursor of the node listing",
        );
    }
    refused(&run(&db, &["jobs", "list", "--state", "'; --"]), "state");
    assert_eq!(job_count(&db).await, 0, "nothing was written");
    assert!(no_queue_settings(&db).await);
    // And the database still takes a good job.
    let ok = run(&db, &["enqueue", "--kind", "k"]);
    assert_eq!(ok.code, Some(0), "{ok:?}");
    assert_eq!(job_count(&db).await, 1);
}

/// An empty or malformed name is refused by every command that takes one, in the words of
/// `validate_name`, a filter of `jobs list` too (it listed nothing, as if the name were
/// fine and merely unused).
#[tokio::test]
async fn empty_and_malformed_names_are_refused_by_every_command() {
    let db = TestDatabase::new().await.expect("test database");
    for (name, said) in [
        ("", "name must be 1 to 128 characters, got 0"),
        ("a b", "has the character ' '"),
    ] {
        let commands: [(&[&str], &str); 10] = [
            (&["enqueue", "--kind", name], "kind"),
            (&["enqueue", "--kind", "k", "--queue", name], "queue"),
            (&["enqueue", "--kind", "k", "--group", name], "group"),
            (&["queues", "pause", name, "--create"], "queue"),
            (&["queues", "resume", name, "--create"], "queue"),
            (
                &["queues", "limit", name, "--concurrency", "2", "--create"],
                "queue",
            ),
            (&["jobs", "list", "--queue", name], "queue"),
            (&["jobs", "list", "--kind", name], "kind"),
            (&["jobs", "list", "--group", name], "group"),
            (&["jobs", "list", "--queue", name, "--json"], "queue"),
        ];
        for (args, what) in commands {
            let exit = run(&db, args);
            if args.contains(&"--json") {
                assert_eq!(exit.code, Some(1), "{exit:?}");
                let error: Value = serde_json::from_str(exit.stdout.trim()).expect("JSON");
                assert_eq!(error["error"]["code"], "invalid_input", "{exit:?}");
                continue;
            }
            refused(&exit, &format!("{what} name"));
            refused(&exit, said);
        }
    }
    assert_eq!(job_count(&db).await, 0, "nothing was written");
    assert!(no_queue_settings(&db).await);
}

/// Durations and instants past `hopper_core::limits` (ten years; 1970 to 9999).
#[tokio::test]
async fn absurd_times_and_delays_are_refused() {
    let db = TestDatabase::new().await.expect("test database");
    refused(
        &run(
            &db,
            &["enqueue", "--kind", "k", "--run-at=1969-12-31T23:59:59Z"],
        ),
        "out of range",
    );
    // A delay is named with its bound, not as the instant it would make.
    for flag in ["--delay=11years", "--delay=9999999999999h"] {
        refused(&run(&db, &["enqueue", "--kind", "k", flag]), "--delay of");
        refused(
            &run(&db, &["enqueue", "--kind", "k", flag]),
            "is too long: durations are at most 315360000000 ms (10 years)",
        );
    }
    assert_eq!(job_count(&db).await, 0);
    // Retentions and pauses as the runtime's pruner takes them (a retention of 300 billion
    // years was the database's "timestamp out of range").
    for flag in ["--completed-older-than", "--failed-older-than", "--pause"] {
        for value in ["11years", "300000000000y"] {
            let exit = run(&db, &["jobs", "prune", flag, value]);
            refused(&exit, &format!("{flag} of"));
        }
    }
}

/// `hopper serve` flags it cannot run with are refused before the database is opened, each
/// naming its flag: the schema given is not even created. (They were checked only once it
/// had been migrated, or by the server at its start, naming the setting, not the flag.)
#[tokio::test]
async fn serve_flags_it_cannot_run_with_are_refused_before_the_database_changes() {
    let db = TestDatabase::new().await.expect("test database");
    let unborn = format!("{}_unborn", db.schema());
    let cases: [(&[&str], &str); 11] = [
        (
            &["--heartbeat", "20s", "--lease", "60s"],
            "--node-dead-after",
        ),
        (&["--node-dead-after", "9s"], "--node-dead-after"),
        (&["--heartbeat", "5ms"], "--heartbeat"),
        (&["--lease", "11years"], "--heartbeat and --lease"),
        (&["--admin-lock-timeout", "soon"], "--admin-lock-timeout"),
        (&["--max-connections", "1000001"], "--max-connections"),
        (
            &["--http", "127.0.0.1:0", "--http-header-timeout", "0s"],
            "--http-header-timeout must be more than zero",
        ),
        (
            &["--http", "127.0.0.1:0", "--http-header-timeout", "soon"],
            "--http-header-timeout \"soon\"",
        ),
        (
            &["--http", "127.0.0.1:0", "--http-body-timeout", "0s"],
            "--http-body-timeout must be more than zero",
        ),
        (
            &["--http", "127.0.0.1:0", "--http-body-timeout", "11y"],
            "--http-body-timeout",
        ),
        (
            &["--http", "127.0.0.1:0", "--http-send-timeout", "0s"],
            "--http-send-timeout must be more than zero",
        ),
    ];
    for (flags, needle) in cases {
        let exit = exit_of(
            command(&db, &["serve"])
                .args(flags)
                .env("HOPPER_SCHEMA", &unborn),
        );
        refused(&exit, needle);
    }
    let (client, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls)
        .await
        .expect("connects");
    tokio::spawn(connection);
    let found = client
        .query_opt("SELECT 1 FROM pg_namespace WHERE nspname = $1", &[&unborn])
        .await
        .expect("looked up");
    assert!(found.is_none(), "schema {unborn} was created");
}

#[tokio::test]
async fn errors_under_json_are_json_objects() {
    let db = TestDatabase::new().await.expect("test database");
    let id = "0192f5c4-7d2e-7b61-9a4c-3f0e8d2b1a55";
    refused_json(&run(&db, &["--json", "jobs", "show", id]), "not_found");
    refused_json(&run(&db, &["--json", "jobs", "cancel", id]), "not_found");
    // Every refusal of the user's input, whoever refused it (the command's own parsing or
    // hopper's validation), is `invalid_input`.
    let enqueue = |flag: &str, value: &str| {
        let flag = format!("{flag}={value}");
        run(&db, &["--json", "enqueue", "--kind", "k", &flag])
    };
    for (flag, value) in [
        ("--args", "nope"),
        ("--run-at", "infinity"),
        ("--delay", "1e30s"),
        ("--delay", "9999999999999h"),
        ("--meta", "[1]"),
        ("--traceparent", "bad"),
    ] {
        refused_json(&enqueue(flag, value), "invalid_input");
    }
    for args in [
        &["jobs", "show", "nope"][..],
        &["jobs", "list", "--meta", "nope"],
        &["queues", "limit", "mail", "--concurrency", "0"],
        &["--lock-timeout", "soon", "stats"],
        &["bench", "--concurrency", "0"],
        &["worker", "--concurrency", "0"],
    ] {
        let exit = run(&db, &[&["--json"][..], args].concat());
        refused_json(&exit, "invalid_input");
    }
    refused_json(
        &run(&db, &["--json", "enqueue", "--kind", "a b"]),
        "invalid_input",
    );
    refused_json(
        &run(&db, &["--json", "jobs", "list", "--limit", "0"]),
        "usage",
    );
    refused_json(&run(&db, &["--json", "nodes", "--limit", "0"]), "usage");
    refused_json(
        &run(&db, &["--json", "nodes", "--before", "zzz"]),
        "invalid_input",
    );
    // clap's whole message, on one line without its usage footer: what is missing.
    let missing = refused_json(&run(&db, &["--json", "enqueue"]), "usage");
    let message = missing["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("not provided: --kind <KIND>"), "{message}");
    assert!(
        !message.contains("Usage") && !message.contains('\n'),
        "{message}"
    );
    refused_json(
        &run(&db, &["--json", "queues", "pause", "nosuch"]),
        "not_found",
    );
    let no_db = Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args(["--json", "stats"])
        .env("DATABASE_URL", "postgres://postgres@127.0.0.1:1/none")
        .output()
        .expect("runs");
    let value: Value = serde_json::from_slice(&no_db.stdout).expect("a JSON error");
    assert_eq!(value["error"]["code"], "unavailable", "{value}");
    let message = value["error"]["message"].as_str().unwrap_or("");
    assert!(!message.contains("database: database"), "{message}");
    assert_eq!(job_count(&db).await, 0);
}

#[tokio::test]
async fn unknown_queues_are_not_created_by_accident() {
    let db = TestDatabase::new().await.expect("test database");
    for verb in ["pause", "resume"] {
        refused(&run(&db, &["queues", verb, "mial"]), "--create");
    }
    let client = hopper::Client::new(db.backend());
    assert!(client.queues().await.expect("queues").is_empty());
    client
        .insert(NewJob::new("k", serde_json::json!({})).with_queue("mail"))
        .await
        .expect("insert");
    assert_eq!(run(&db, &["queues", "pause", "mail"]).code, Some(0));
    assert_eq!(
        run(&db, &["queues", "pause", "later", "--create"]).code,
        Some(0)
    );
    let paused: Vec<String> = client
        .queues()
        .await
        .expect("queues")
        .into_iter()
        .filter(|s| s.paused)
        .map(|s| s.queue)
        .collect();
    assert_eq!(paused, ["later", "mail"]);
}

#[tokio::test]
async fn a_duplicate_enqueue_says_so() {
    let db = TestDatabase::new().await.expect("test database");
    let args = ["enqueue", "--kind", "k", "--unique-key", "only-one"];
    let first = run(&db, &args).stdout.trim().to_owned();
    let second = run(&db, &args);
    assert_eq!(second.stdout.trim(), format!("duplicate of {first}"));
    let json = run(&db, &[&["--json"][..], &args[..]].concat());
    let value: Value = serde_json::from_str(&json.stdout).expect("JSON");
    assert_eq!(value["outcome"], "duplicate");
    assert_eq!(value["id"], first.as_str());
    assert_eq!(job_count(&db).await, 1);
}

/// Reads a little of the child's stdout, closes it, and returns how the child ended.
fn close_stdout_early(mut child: Child) -> (Option<i32>, String) {
    let mut stdout = child.stdout.take().expect("piped");
    let mut first = [0u8; 64];
    stdout.read_exact(&mut first).expect("some output");
    drop(stdout);
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        pipe.read_to_string(&mut stderr).expect("stderr");
    }
    let status = child.wait().expect("exits");
    (status.code(), stderr)
}

#[tokio::test]
async fn a_closed_stdout_ends_commands_quietly() {
    let db = TestDatabase::new().await.expect("test database");
    let jobs: Vec<NewJob> = (0..2000)
        .map(|n| NewJob::new("k", serde_json::json!({ "n": n, "pad": "x".repeat(200) })))
        .collect();
    hopper::Client::new(db.backend())
        .insert_many(&jobs)
        .await
        .expect("insert");
    for args in [
        &["--json", "jobs", "list", "--limit", "2000"][..],
        &["jobs", "list", "--limit", "2000"][..],
        &["stats", "--watch", "--interval", "100ms"][..],
        &["--json", "stats", "--watch", "--interval", "100ms"][..],
    ] {
        let child = command(&db, args).spawn().expect("starts");
        let (code, stderr) = close_stdout_early(child);
        assert_eq!(code, Some(141), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?} said something: {stderr}");
    }
}

#[test]
fn no_colour_in_pipes_and_no_token_in_errors() {
    let output = Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args(["stats"])
        .env(
            "DATABASE_URL",
            "tcp://127.0.0.1:1?token=secret-token-0123456789",
        )
        .env("HOPPER_LOG", "debug")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        !stderr.contains('\u{1b}'),
        "colour codes in a pipe: {stderr}"
    );
    assert!(!stderr.contains("secret-token"), "{stderr}");
    // The error line, among the debug log lines that HOPPER_LOG=debug lets through.
    let error = stderr
        .lines()
        .find(|l| l.starts_with("error"))
        .unwrap_or("");
    assert!(
        error.contains("hopper server at tcp://127.0.0.1:1"),
        "{stderr}"
    );
    assert!(
        !error.contains("database"),
        "a server is not a database: {error}"
    );
}

// ---- HTTP, against the real `hopper serve --http` ---------------------------------------

/// A running `hopper serve --http 127.0.0.1:0`, its address and everything it logged.
struct Served {
    child: Child,
    addr: String,
    log: Arc<Mutex<String>>,
}

impl Served {
    fn start(db: &TestDatabase, extra: &[&str], env: &[(&str, &str)]) -> Served {
        let mut args = vec!["serve", "--http", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let mut command = command(db, &args);
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("hopper serve starts");
        let stderr = child.stderr.take().expect("piped");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("HTTP API on http://").nth(1) {
                    let addr = rest.split('/').next().unwrap_or("").to_owned();
                    let _ = tx.send(addr);
                }
                if let Ok(mut log) = sink.lock() {
                    log.push_str(&line);
                    log.push('\n');
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("hopper serve prints its HTTP address");
        Served { child, addr, log }
    }

    /// Sends one raw HTTP/1.1 request; returns the status and the body.
    fn send(&self, head: &str, body: &[u8]) -> (u16, String) {
        let mut stream = TcpStream::connect(&self.addr).expect("connects");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let request = format!(
            "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(request.as_bytes()).expect("writes");
        // The server may refuse before reading the whole body.
        let _ = stream.write_all(body);
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let status = answer
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
        (status, body)
    }

    fn get(&self, path: &str, host: &str, extra: &str) -> (u16, String) {
        self.send(&format!("GET {path} HTTP/1.1\r\nHost: {host}{extra}"), b"")
    }

    fn log(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn code_of(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .map(|v| v["error"]["code"].as_str().unwrap_or("").to_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn http_refuses_rebinding_and_cross_site_requests_even_open() {
    let db = TestDatabase::new().await.expect("test database");
    let served = Served::start(&db, &["--http-open", "--http-host", "hopper.test"], &[]);
    let host = served.addr.clone();
    // DNS rebinding: the attacker's name in Host.
    for path in ["/api/v1/jobs", "/", "/api/v1/queues"] {
        let (status, body) = served.get(path, "attacker.example", "");
        assert_eq!(status, 403, "{path}: {body}");
        assert_eq!(code_of(&body), "host_not_allowed");
    }
    for name in [host.as_str(), "localhost", "hopper.test:443"] {
        assert_eq!(served.get("/api/v1/jobs", name, "").0, 200, "{name}");
    }
    // The reproduction: a plain HTML form on another site pauses a queue.
    let form = format!(
        "POST /api/v1/queues/default/pause HTTP/1.1\r\nHost: {host}\r\n\
         Origin: http://attacker.example\r\nContent-Type: application/x-www-form-urlencoded"
    );
    let (status, body) = served.send(&form, b"x=1");
    assert_eq!(
        (status, code_of(&body).as_str()),
        (403, "cross_origin"),
        "{body}"
    );
    // The same body without Origin: still not JSON.
    let plain = format!("POST /api/v1/jobs HTTP/1.1\r\nHost: {host}\r\nContent-Type: text/plain");
    let (status, _) = served.send(&plain, br#"{"kind": "k"}"#);
    assert_eq!(status, 415);
    assert!(no_queue_settings(&db).await);
    assert_eq!(job_count(&db).await, 0);
    // The dashboard's own request goes through.
    let same = format!(
        "POST /api/v1/queues/default/pause HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}"
    );
    assert_eq!(served.send(&same, b"").0, 200);
}

#[tokio::test]
async fn http_hostile_bodies_and_credentials_get_clear_errors() {
    let db = TestDatabase::new().await.expect("test database");
    let token = "admin-token-hostile-0123456789";
    let served = Served::start(
        &db,
        &[],
        &[("HOPPER_HTTP_ADMIN_TOKENS", token), ("HOPPER_LOG", "warn")],
    );
    let host = served.addr.clone();
    let post = |body: &[u8]| {
        served.send(
            &format!(
                "POST /api/v1/jobs HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\
                 Content-Type: application/json"
            ),
            body,
        )
    };
    for (body, status) in [
        (&b"{"[..], 400),
        (b"not json", 400),
        (b"[]", 400),
        (br#"{"kind": "a b"}"#, 400),
        (br#"{"kind": "k", "queue": "'; DROP TABLE jobs; --"}"#, 400),
        (br#"{"kind": "k", "run_at": "infinity"}"#, 400),
        (br#"{"kind": "k", "run_at": "1969-12-31T23:59:59Z"}"#, 400),
        (br#"{"kind": "k", "delay_ms": 18446744073709551615}"#, 400),
        (br#"{"kind": "k", "delay_ms": 400000000000}"#, 400),
    ] {
        let (got, text) = post(body);
        assert_eq!(got, status, "{}: {text}", String::from_utf8_lossy(body));
        assert!(!code_of(&text).is_empty(), "{text}");
    }
    let mut huge = br#"{"kind": "k", "args": {"blob": ""#.to_vec();
    huge.resize(hopper_web::DEFAULT_MAX_BODY_BYTES + 1024, b'y');
    huge.extend(br#""}}"#);
    assert_eq!(post(&huge).0, 413);
    // Wrong credentials, with a 60 KB path: 401, and the log line stays short.
    let long = format!("/api/v1/jobs/{}", "x".repeat(60_000));
    for auth in [
        "",
        "\r\nAuthorization: Bearer wrong-token-0123456789",
        "\r\nAuthorization: Basic !!!",
    ] {
        assert_eq!(served.get(&long, &host, auth).0, 401, "{auth:?}");
    }
    for _ in 0..50 {
        assert_eq!(served.get("/api/v1/jobs", &host, "").0, 401);
    }
    assert_eq!(job_count(&db).await, 0, "nothing was written");
    let auth = format!("\r\nAuthorization: Bearer {token}");
    assert_eq!(
        served.get("/api/v1/jobs", &host, &auth).0,
        200,
        "still serving"
    );
    let log = served.log();
    let refused = log
        .lines()
        .filter(|l| l.contains("refused an HTTP request"))
        .count();
    assert!(
        (1..=hopper_web::REFUSALS_LOGGED as usize).contains(&refused),
        "{refused} refusal lines:\n{log}"
    );
    assert!(
        log.lines().all(|l| l.len() < 1000),
        "an uncapped log line:\n{log}"
    );
    assert!(
        !log.contains(token) && !log.contains("wrong-token"),
        "{log}"
    );
}
