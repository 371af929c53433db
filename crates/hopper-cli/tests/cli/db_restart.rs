//! The long-running commands ride through a restart of PostgreSQL: `hopper bench --workload
//! drain` finishes its drain, `hopper worker` keeps running jobs, `hopper stats --watch
//! --json` keeps printing, while the server restarts ("the database system is shutting
//! down", then refused connections). `hopper serve` started while PostgreSQL is down waits
//! for it, then serves, and serves on through a restart, every maintenance service riding
//! it out (a service that took the restart for a lasting failure would stop the process).
//!
//! The restarted server is a private cluster of this test (`initdb` into a temporary
//! directory, `pg_ctl` of the newest installed PostgreSQL on a free port, as the `postgres` user when the test runs as root),
//! never the machine's shared one.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use hopper::backend::Backend;
use hopper::{Client, JobListParams, JobState, NewJob, PgBackend, PgOptions};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The programs of the newest PostgreSQL installed (Debian's layout, as `.ci/run` installs it).
fn bin() -> PathBuf {
    let versions = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten();
    let newest = versions
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .max()
        .unwrap_or(15);
    PathBuf::from(format!("/usr/lib/postgresql/{newest}/bin"))
}

/// A PostgreSQL cluster of its own: stopped and deleted on drop.
struct Cluster {
    dir: PathBuf,
    port: u16,
}

impl Cluster {
    /// A cluster started (`initdb`, then `pg_ctl start`).
    async fn start() -> anyhow::Result<Self> {
        let cluster = Cluster::init().await?;
        cluster.pg_ctl("start").await?;
        Ok(cluster)
    }

    /// A cluster initialised but not started: nothing listens on its port yet.
    async fn init() -> anyhow::Result<Self> {
        let dir =
            std::env::temp_dir().join(format!("hopper-restart-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let cluster = Cluster { dir, port };
        if as_root() {
            let owner = Command::new("chown")
                .args(["postgres:postgres", &cluster.dir.display().to_string()])
                .status()
                .await?;
            anyhow::ensure!(owner.success(), "chown of the cluster directory failed");
        }
        let data = cluster.data();
        cluster
            .run(
                "initdb",
                &["-D", &data, "-U", "postgres", "--auth=trust", "-N"],
            )
            .await?;
        Ok(cluster)
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// `pg_ctl start|restart|stop`, waiting until the server accepts connections (or, for
    /// stop, has stopped).
    async fn pg_ctl(&self, action: &str) -> anyhow::Result<()> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("log").display().to_string();
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-o",
                &options,
                "-l",
                &log,
                "-m",
                "fast",
                "-w",
                action,
            ],
        )
        .await
    }

    /// Runs a PostgreSQL program, as `postgres` when this test is root.
    async fn run(&self, program: &str, args: &[&str]) -> anyhow::Result<()> {
        let path = bin().join(program);
        let mut command = if as_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&path);
            c
        } else {
            Command::new(&path)
        };
        let output = command.args(args).stdin(Stdio::null()).output().await?;
        anyhow::ensure!(
            output.status.success(),
            "{program} {args:?} failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data();
        let args = ["-D", data.as_str(), "-m", "immediate", "-w", "stop"];
        let path = bin().join("pg_ctl");
        let _ = if as_root() {
            std::process::Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&path)
                .args(args)
                .output()
        } else {
            std::process::Command::new(&path).args(args).output()
        };
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn as_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn hopper(url: &str, args: &[&str]) -> std::io::Result<Child> {
    Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args(["--database-url", url])
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
}

async fn jobs(client: &Client, queue: &str) -> hopper::Result<Vec<hopper::JobRecord>> {
    client
        .jobs(&JobListParams {
            queue: Some(queue.to_owned()),
            limit: 10_000,
            ..JobListParams::default()
        })
        .await
}

/// Waits until `done` holds for the jobs of `queue`, reading through errors (the server may
/// be restarting).
async fn wait_for(
    client: &Client,
    queue: &str,
    limit: Duration,
    done: impl Fn(&[hopper::JobRecord]) -> bool,
) -> anyhow::Result<()> {
    let start = tokio::time::Instant::now();
    loop {
        if let Ok(all) = jobs(client, queue).await
            && done(&all)
        {
            return Ok(());
        }
        anyhow::ensure!(
            start.elapsed() < limit,
            "{queue}: not done within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn bench_jobs(queue: &str, n: u64) -> Vec<NewJob> {
    (0..n)
        .map(|n| NewJob::new("bench", serde_json::json!({ "n": n })).with_queue(queue))
        .collect()
}

#[tokio::test]
async fn long_running_commands_ride_through_a_database_restart() -> anyhow::Result<()> {
    let cluster = Cluster::start().await?;
    let url = cluster.url();
    let backend = PgBackend::connect(&url, PgOptions::default()).await?;
    backend.migrate().await?;
    let backend: Arc<dyn Backend> = Arc::new(backend);
    let client = Client::new(backend.clone());
    client.insert_many(&bench_jobs("bench", 1_500)).await?;

    let drain = hopper(
        &url,
        &[
            "--json",
            "bench",
            "--workload",
            "drain",
            "--work-ms",
            "20",
            "--concurrency",
            "8",
        ],
    )?;
    let worker = hopper(&url, &["worker", "--queue", "side", "--concurrency", "2"])?;
    let mut watch = hopper(&url, &["--json", "stats", "--watch", "--interval", "200ms"])?;
    let mut lines = BufReader::new(
        watch
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("stdout"))?,
    )
    .lines();

    wait_for(&client, "bench", Duration::from_secs(30), |all| {
        all.iter()
            .filter(|j| j.state == JobState::Completed)
            .count()
            >= 200
    })
    .await?;
    cluster.pg_ctl("restart").await?;

    // The drain finishes every job, each once.
    let output = tokio::time::timeout(Duration::from_secs(60), drain.wait_with_output())
        .await
        .map_err(|_| anyhow::anyhow!("the drain did not finish within 60 s of the restart"))??;
    assert!(
        output.status.success(),
        "the drain failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let all = jobs(&client, "bench").await?;
    assert_eq!(all.len(), 1_500);
    for job in &all {
        assert_eq!(job.state, JobState::Completed, "{job:?}");
        assert_eq!(job.errors.len() as i32, job.attempt - 1, "{job:?}");
    }

    // The worker, started before the restart, runs jobs enqueued after it.
    client.insert_many(&bench_jobs("side", 10)).await?;
    wait_for(&client, "side", Duration::from_secs(30), |all| {
        all.len() == 10 && all.iter().all(|j| j.state == JobState::Completed)
    })
    .await?;

    // The live view is still printing.
    let mut after = 0;
    while after < 3 {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .map_err(|_| anyhow::anyhow!("stats --watch went quiet"))??
            .ok_or_else(|| anyhow::anyhow!("stats --watch exited"))?;
        if line.contains("\"side\"") {
            after += 1;
        }
    }
    for mut child in [worker, watch] {
        assert_eq!(
            child.try_wait()?,
            None,
            "a command exited during the restart"
        );
        child.kill().await?;
    }
    Ok(())
}

/// The lines a child writes on stderr, as they come.
fn stderr_lines(child: &mut Child) -> anyhow::Result<tokio::sync::mpsc::UnboundedReceiver<String>> {
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| anyhow::anyhow!("stderr"))?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    Ok(rx)
}

/// The next line holding `text` within `limit`; the lines before it are kept in `seen`.
async fn line_with(
    lines: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    seen: &mut Vec<String>,
    text: &str,
    limit: Duration,
) -> anyhow::Result<String> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let line = tokio::time::timeout_at(deadline, lines.recv())
            .await
            .map_err(|_| anyhow::anyhow!("no line with {text:?} within {limit:?}: {seen:#?}"))?
            .ok_or_else(|| {
                anyhow::anyhow!("the process ended before saying {text:?}: {seen:#?}")
            })?;
        if line.contains(text) {
            return Ok(line);
        }
        seen.push(line);
    }
}

/// Enqueues `n` jobs on `queue`, through errors while the database restarts.
async fn enqueue(client: &Client, queue: &str, n: u64) -> anyhow::Result<()> {
    let start = tokio::time::Instant::now();
    loop {
        match client.insert_many(&bench_jobs(queue, n)).await {
            Ok(_) => return Ok(()),
            Err(e) if start.elapsed() < Duration::from_secs(30) => {
                eprintln!("enqueue failed ({e}); again");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[tokio::test]
async fn serve_waits_for_the_database_and_rides_through_its_restart() -> anyhow::Result<()> {
    // A migrated database, stopped: the direct worker needs the tables (a worker refuses to
    // start on a database nobody migrated; the server migrates).
    let cluster = Cluster::start().await?;
    let url = cluster.url();
    PgBackend::connect(&url, PgOptions::default())
        .await?
        .migrate()
        .await?;
    cluster.pg_ctl("stop").await?;
    let mut serve = hopper(
        &url,
        &[
            "serve",
            "--listen",
            "tcp://127.0.0.1:0",
            "--insecure-no-auth",
            "--heartbeat",
            "1s",
        ],
    )?;
    let mut lines = stderr_lines(&mut serve)?;
    let mut seen = Vec::new();
    // A worker of its own on the database, started while it is down too.
    let mut direct = hopper(&url, &["worker", "--queue", "direct", "--concurrency", "2"])?;
    let mut direct_lines = stderr_lines(&mut direct)?;

    // Nothing listens on the port yet: the server says it waits, and why, once, and does
    // not exit.
    let waiting = line_with(&mut lines, &mut seen, "retrying", Duration::from_secs(30)).await?;
    assert_eq!(
        waiting.matches("could not connect to PostgreSQL").count(),
        1,
        "{waiting}"
    );
    assert!(!waiting.contains(": database: "), "{waiting}");
    assert_eq!(serve.try_wait()?, None, "serve exited: {seen:#?}");
    let mut direct_seen = Vec::new();
    line_with(
        &mut direct_lines,
        &mut direct_seen,
        "retrying",
        Duration::from_secs(30),
    )
    .await?;
    cluster.pg_ctl("start").await?;
    let up = tokio::time::Instant::now();
    let line = line_with(
        &mut lines,
        &mut seen,
        "listening on ",
        Duration::from_secs(60),
    )
    .await?;
    eprintln!(
        "serve listening {:?} after PostgreSQL accepted connections",
        up.elapsed()
    );
    let endpoint = crate::common::serve_endpoint(&line)?;

    // It serves: a remote worker runs jobs through it.
    let backend: Arc<dyn Backend> = Arc::new(PgBackend::connect(&url, PgOptions::default()).await?);
    let client = Client::new(backend);
    let worker = hopper(
        &endpoint,
        &["worker", "--queue", "served", "--concurrency", "2"],
    )?;
    enqueue(&client, "served", 10).await?;
    wait_for(&client, "served", Duration::from_secs(30), |all| {
        all.len() == 10 && all.iter().all(|j| j.state == JobState::Completed)
    })
    .await?;

    // PostgreSQL restarts under it: it keeps serving, healthy.
    cluster.pg_ctl("restart").await?;
    let up = tokio::time::Instant::now();
    enqueue(&client, "served", 10).await?;
    wait_for(&client, "served", Duration::from_secs(60), |all| {
        all.len() == 20 && all.iter().all(|j| j.state == JobState::Completed)
    })
    .await?;
    eprintln!(
        "10 jobs enqueued and run through serve {:?} after the restart",
        up.elapsed()
    );
    assert_eq!(serve.try_wait()?, None, "serve exited during the restart");
    enqueue(&client, "direct", 10).await?;
    let direct_done = wait_for(&client, "direct", Duration::from_secs(30), |all| {
        all.len() == 10 && all.iter().all(|j| j.state == JobState::Completed)
    })
    .await;
    while let Ok(line) = direct_lines.try_recv() {
        direct_seen.push(line);
    }
    direct_done.map_err(|e| anyhow::anyhow!("{e}: {direct_seen:#?}, {:?}", direct.try_wait()))?;
    while let Ok(line) = lines.try_recv() {
        seen.push(line);
    }
    assert!(
        !seen
            .iter()
            .any(|l| l.contains("giving up") || l.contains("unhealthy")),
        "a service took the restart for a lasting failure: {seen:#?}"
    );
    for mut child in [worker, direct, serve] {
        child.kill().await?;
    }
    Ok(())
}

/// What waiting will not cure is not waited for: a database that does not exist on a server
/// that answers ends `hopper serve` at once, with the server's words.
#[tokio::test]
async fn serve_fails_at_once_on_a_database_that_does_not_exist() -> anyhow::Result<()> {
    let url = hopper::testing::database_url();
    let (base, _) = url.rsplit_once('/').unwrap_or((url.as_str(), ""));
    let missing = format!("{base}/hopper_no_such_database");
    let serve = hopper(
        &missing,
        &[
            "serve",
            "--listen",
            "tcp://127.0.0.1:0",
            "--insecure-no-auth",
        ],
    )?;
    let output = tokio::time::timeout(Duration::from_secs(20), serve.wait_with_output())
        .await
        .map_err(|_| anyhow::anyhow!("serve waited for a database that does not exist"))??;
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{said}");
    assert!(said.contains("does not exist"), "{said}");
    assert!(!said.contains("retrying"), "{said}");
    Ok(())
}
