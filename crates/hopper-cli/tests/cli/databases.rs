//! The `hopper` binary against databases that are not as it expects: unreachable, a
//! schema never migrated or newer than the build, none at all (the embedded SQLite file),
//! and a row another transaction holds.

use std::process::{Command, Stdio};
use std::time::Duration;

use hopper::JobState;
use hopper::backend::JobGetParams;
use hopper::testing::{PgBouncer, TestDatabase};

use crate::cli::{Run, hopper};

#[tokio::test]
async fn an_unreachable_database_is_one_clear_line() {
    let db = TestDatabase::new().await.expect("test database");
    let nowhere = "postgres://postgres@127.0.0.1:1/x";
    for command in [&["stats"][..], &["migrate"], &["jobs", "list"], &["demo"]] {
        let mut args = vec!["--database-url", nowhere];
        args.extend_from_slice(command);
        hopper(&db, &args)
            .fails_with("cannot open the database: could not connect to PostgreSQL: error connecting to server: Connection refused");
    }
    // Bad input is reported as such, before any connection is tried.
    hopper(
        &db,
        &[
            "--database-url",
            nowhere,
            "enqueue",
            "--kind",
            "k",
            "--priority",
            "x",
        ],
    )
    .fails_with("unknown priority");
}

/// `hopper bench --workload drain` on a schema whose job table is missing (or a schema
/// never migrated) ends at once saying to migrate, as the other commands do: it retried
/// the missing table for two minutes.
#[tokio::test]
async fn bench_without_a_job_table_ends_at_once() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let bench = ["bench", "--workload", "drain"];
    let pg = db.pg().pool().get().await?;
    pg.batch_execute(&format!(
        "ALTER TABLE {}.jobs RENAME TO jobs_away",
        db.schema()
    ))
    .await?;
    let run = run_within_20s(&db, db.url(), "none", &bench)?;
    assert!(!run.success, "{run:?}");
    let last = run.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: counting unfinished jobs: "),
        "{run:?}"
    );
    assert!(last.contains("run `hopper migrate`"), "{last}");
    assert_eq!(
        last.matches("counting unfinished jobs").count(),
        1,
        "{last}"
    );
    assert!(!run.stderr.contains("retrying"), "{run:?}");

    pg.batch_execute(&format!("DROP SCHEMA {} CASCADE", db.schema()))
        .await?;
    drop(pg);
    let run = run_within_20s(&db, db.url(), "none", &bench)?;
    assert!(!run.success, "{run:?}");
    let last = run.stderr.lines().last().unwrap_or_default();
    assert!(last.contains("run `hopper migrate`"), "{run:?}");
    Ok(())
}

/// A schema newer than this build ends the commands that run jobs at once, `hopper
/// worker` and `hopper bench` with the message of `hopper migrate` (the worker ran on);
/// the admin commands go on.
#[tokio::test]
async fn a_newer_schema_ends_the_commands_that_run_jobs() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let pg = db.pg().pool().get().await?;
    pg.batch_execute(&format!(
        "INSERT INTO {}.migrations (version, name) VALUES (9999, 'from_the_future')",
        db.schema()
    ))
    .await?;
    drop(pg);
    let refusal = format!(
        "schema {} is at version 9999, but this hopper knows versions up to",
        db.schema()
    );
    hopper(&db, &["migrate"]).fails_with(&refusal);
    for command in [&["worker"][..], &["bench", "--workload", "drain"]] {
        let run = run_within_20s(&db, db.url(), "none", command)?;
        run.fails_with(&refusal);
    }
    hopper(&db, &["stats"]).ok();
    Ok(())
}

/// With no `DATABASE_URL`, hopper uses an embedded SQLite file in the current directory and
/// says so: the demo runs on a machine with no database server.
#[test]
fn no_database_url_means_embedded_sqlite() {
    let dir = std::env::temp_dir().join(format!("hopper-cli-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let output = Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args(["demo", "--jobs", "24", "--json"])
        .current_dir(&dir)
        .env_remove("DATABASE_URL")
        .env_remove("HOPPER_SCHEMA")
        .output()
        .expect("the hopper binary runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("sqlite://hopper.db"), "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).expect("JSON summary");
    assert_eq!(summary["completed"], 22, "{stdout}");
    assert_eq!(summary["failed"], 2, "{stdout}");
}

/// `hopper serve` with no `DATABASE_URL` serves the embedded SQLite file too, says so and
/// creates it, as README's `hopper serve --http 127.0.0.1:7011` expects beside `hopper
/// enqueue` and `hopper jobs list` in the same directory: the job one enqueues is the job
/// the other serves.
#[test]
fn serve_without_a_database_url_serves_the_embedded_file() -> anyhow::Result<()> {
    let dir = crate::common::TempDir::new("serve-embedded")?;
    let serve = crate::common::Hopper::start_embedded(
        dir.path(),
        &["serve", "--http", "127.0.0.1:0", "--http-open"],
    )?;
    serve.line_with("sqlite://hopper.db", Duration::from_secs(30))?;
    let line = serve.line_with("HTTP API on http://", Duration::from_secs(30))?;
    let (_, addr) = crate::common::http_address(&line)?;
    assert!(dir.path().join("hopper.db").exists());
    let enqueued = Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args(["enqueue", "--kind", "k"])
        .current_dir(dir.path())
        .env_remove("DATABASE_URL")
        .env_remove("HOPPER_SCHEMA")
        .output()?;
    assert!(enqueued.status.success(), "{enqueued:?}");
    let id = String::from_utf8_lossy(&enqueued.stdout).trim().to_owned();
    let path = format!("/api/v1/jobs/{id}");
    let response = crate::common::http_request(&addr, "GET", &path, Duration::from_secs(20))?;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    Ok(())
}

/// A SQLite file that does not exist is created only by the commands that migrate
/// (`migrate`, `demo`, `serve`): every other command says, at once, that it does not exist
/// and to run `hopper migrate`, and leaves nothing behind (a mistyped path left an empty
/// database file, and the commands that wait for a database retried it for two minutes).
#[test]
fn a_missing_sqlite_file_is_named_and_never_created() -> anyhow::Result<()> {
    let dir = crate::common::TempDir::new("missing-sqlite")?;
    let path = dir.path().join("typo.db");
    let url = format!("sqlite://{}", path.display());
    assert!(url.starts_with("sqlite:///"), "{url}");
    let nothing_in_dir = || -> anyhow::Result<()> {
        let left: Vec<_> = std::fs::read_dir(dir.path())?.collect();
        anyhow::ensure!(left.is_empty(), "left behind: {left:?}");
        Ok(())
    };
    let said = format!("SQLite database file {} does not exist", path.display());
    let id = uuid::Uuid::now_v7().to_string();
    let commands: [&[&str]; 12] = [
        &["stats"],
        &["stats", "--watch"],
        &["jobs", "list"],
        &["jobs", "show", &id],
        &["jobs", "prune", "--dry-run"],
        &["enqueue", "--kind", "k"],
        &["queues", "list"],
        &["queues", "pause", "mail", "--create"],
        &["cron", "list"],
        &["nodes"],
        &["bench", "--workload", "drain"],
        &["worker"],
    ];
    for args in commands {
        let run = sqlite_within_20s(&url, args)?;
        assert!(!run.success, "{args:?}: {run:?}");
        let last = run.stderr.lines().last().unwrap_or_default();
        assert!(last.contains(&said), "{args:?}: {run:?}");
        assert!(last.contains("`hopper migrate`"), "{args:?}: {last}");
        assert!(!run.stderr.contains("retrying"), "{args:?}: {run:?}");
        nothing_in_dir()?;
    }
    let run = sqlite_within_20s(&url, &["--json", "stats"])?;
    let error: serde_json::Value = serde_json::from_str(run.stdout.trim())?;
    assert_eq!(error["error"]["code"], "not_found", "{run:?}");
    nothing_in_dir()?;

    // The embedded default, `hopper.db` in the current directory, likewise.
    let output = Command::new(env!("CARGO_BIN_EXE_hopper"))
        .arg("stats")
        .current_dir(dir.path())
        .env_remove("DATABASE_URL")
        .env_remove("HOPPER_SCHEMA")
        .output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("SQLite database file hopper.db does not exist"),
        "{stderr}"
    );
    nothing_in_dir()?;

    // `migrate` creates it; then the other commands open it.
    let created = sqlite_within_20s(&url, &["migrate"])?;
    assert!(created.success, "{created:?}");
    assert!(path.exists());
    let stats = sqlite_within_20s(&url, &["stats"])?;
    assert!(stats.success, "{stats:?}");
    Ok(())
}

/// `hopper ARGS` on the SQLite database `url`, killed past 20 s.
fn sqlite_within_20s(url: &str, args: &[&str]) -> anyhow::Result<Run> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hopper"));
    command
        .args(args)
        .env("DATABASE_URL", url)
        .env_remove("HOPPER_SCHEMA")
        .env_remove("HOPPER_POOLER");
    within_20s(command, &format!("{args:?} on {url}"))
}

/// `hopper ARGS` on the test's schema through `url` with `pooler`, killed past 20 s so
/// that a command that waits on a held row fails the test rather than hanging it.
fn run_within_20s(
    db: &TestDatabase,
    url: &str,
    pooler: &str,
    args: &[&str],
) -> anyhow::Result<Run> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hopper"));
    command
        .args(args)
        .env("DATABASE_URL", url)
        .env("HOPPER_SCHEMA", db.schema())
        .env("HOPPER_POOLER", pooler);
    within_20s(command, &format!("{args:?} through {pooler:?}"))
}

/// Runs `command` (without a direct URL or logs, stdin closed), killed past 20 s: a
/// command that waits fails the test rather than hanging it.
fn within_20s(mut command: Command, what: &str) -> anyhow::Result<Run> {
    let mut child = command
        .env_remove("HOPPER_DIRECT_URL")
        .env_remove("HOPPER_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let started = std::time::Instant::now();
    while child.try_wait()?.is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            anyhow::bail!("{what} still ran after 20 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output()?;
    Ok(Run {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    })
}

/// An admin command that meets a row another transaction holds waits for it at most
/// `--lock-timeout`, then fails saying so, and changes nothing; once the row is free, it
/// does its work. Connected directly (the bound a setting of the connection) and through
/// PgBouncer in transaction mode (the bound a `SET LOCAL` of the command's own
/// transaction; a session setting there would not last, and the command waited for the
/// holder).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_command_waits_for_a_held_row_at_most_its_bound() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let bouncer = PgBouncer::start()?;
    for (url, pooler) in [(db.url(), "none"), (bouncer.url(), "transaction")] {
        let job = hopper::NewJob::new("held", serde_json::json!({}));
        db.backend().job_insert(&job).await?;
        let id = job.id.to_string();
        let state = async || -> anyhow::Result<Option<JobState>> {
            let stored = db.backend().job_get(&JobGetParams { id: job.id }).await?;
            Ok(stored.map(|j| j.state))
        };
        // A cancel, then a retry of the cancelled job: each waits 300 ms on the held row,
        // then goes through once it is free.
        for (action, before, after) in [
            ("cancel", JobState::Available, JobState::Cancelled),
            ("retry", JobState::Cancelled, JobState::Available),
        ] {
            let args = ["--lock-timeout", "300ms", "jobs", action, &id];
            let hold = db.hold_job(job.id).await?;
            run_within_20s(&db, url, pooler, &args)?.fails_with("another transaction holds a lock");
            hold.release().await?;
            assert_eq!(
                state().await?,
                Some(before),
                "{pooler} {action}: nothing changed"
            );
            run_within_20s(&db, url, pooler, &args)?.ok();
            assert_eq!(
                state().await?,
                Some(after),
                "{pooler} {action}: done once free"
            );
        }
    }
    Ok(())
}
