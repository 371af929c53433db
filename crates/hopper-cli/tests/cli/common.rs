//! A `hopper` child process whose output the test reads line by line, shared by the tests
//! that start one.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use hopper::testing::TestDatabase;

/// A directory of its own under the system's temp dir, removed with its files on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A new empty directory, `hopper-cli-<what>-<uuid>`.
    pub fn new(what: &str) -> std::io::Result<Self> {
        let name = format!("hopper-cli-{what}-{}", uuid::Uuid::now_v7().simple());
        let dir = TempDir(std::env::temp_dir().join(name));
        std::fs::create_dir_all(&dir.0)?;
        Ok(dir)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A `hopper` child process, killed on drop, and the lines it writes (stdout and stderr).
pub struct Hopper {
    pub child: Child,
    lines: mpsc::Receiver<String>,
}

impl Drop for Hopper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Hopper {
    /// Starts `hopper ARGS` on `db` (its URL and schema in the environment), through `sh`
    /// with `shell` run first (`""` for none, `ulimit -Sn 256` to lower a limit).
    pub fn start(db: &TestDatabase, shell: &str, args: &[&str]) -> anyhow::Result<Self> {
        let script = format!("{shell}\nexec \"$0\" \"$@\"");
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(script)
            .arg(env!("CARGO_BIN_EXE_hopper"))
            .args(args)
            .env("DATABASE_URL", db.url())
            .env("HOPPER_SCHEMA", db.schema());
        Self::spawn(command)
    }

    /// Starts `hopper ARGS` on the database at `url`, in hopper's default schema.
    pub fn start_at(url: &str, args: &[&str]) -> anyhow::Result<Self> {
        let mut command = Command::new(env!("CARGO_BIN_EXE_hopper"));
        command
            .args(args)
            .env("DATABASE_URL", url)
            .env_remove("HOPPER_SCHEMA");
        Self::spawn(command)
    }

    /// Starts `hopper ARGS` in `dir` with no database configured: the embedded SQLite
    /// file, `hopper.db` there.
    pub fn start_embedded(dir: &Path, args: &[&str]) -> anyhow::Result<Self> {
        let mut command = Command::new(env!("CARGO_BIN_EXE_hopper"));
        command
            .args(args)
            .current_dir(dir)
            .env_remove("DATABASE_URL")
            .env_remove("HOPPER_SCHEMA");
        Self::spawn(command)
    }

    /// Spawns `command` (logging at `info`), its stdout and stderr read line by line.
    fn spawn(mut command: Command) -> anyhow::Result<Self> {
        let mut child = command
            .env("HOPPER_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let (tx, lines) = mpsc::channel();
        let outputs: [Box<dyn Read + Send>; 2] = [
            Box::new(
                child
                    .stdout
                    .take()
                    .ok_or_else(|| anyhow::anyhow!("no stdout"))?,
            ),
            Box::new(
                child
                    .stderr
                    .take()
                    .ok_or_else(|| anyhow::anyhow!("no stderr"))?,
            ),
        ];
        for out in outputs {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
        }
        Ok(Hopper { child, lines })
    }

    /// The next line holding `text`, read within `limit`; the lines before it are gone.
    pub fn line_with(&self, text: &str, limit: Duration) -> anyhow::Result<String> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .map_err(|_| anyhow::anyhow!("no line with {text:?} within {limit:?}"))?;
            if line.contains(text) {
                return Ok(line);
            }
        }
    }

    /// Every line written from now until the process ends, once it has.
    pub fn rest(&self) -> Vec<String> {
        self.lines.iter().collect()
    }
}

/// The endpoint in `hopper serve`'s "listening on tcp://…" line.
pub fn serve_endpoint(line: &str) -> anyhow::Result<String> {
    let endpoint = line
        .split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_default()
        .to_owned();
    anyhow::ensure!(endpoint.starts_with("tcp://"), "no endpoint in {line:?}");
    Ok(endpoint)
}

/// `hopper serve --listen tcp://127.0.0.1:0 --insecure-no-auth --http 127.0.0.1:0
/// --http-open` on `db`, with `more` arguments, once it says where it listens: the
/// process, its ZeroMQ endpoint and its HTTP address (`host:port`).
pub fn serve_open_http(
    db: &TestDatabase,
    more: &[&str],
) -> anyhow::Result<(Hopper, String, String)> {
    let mut args = vec![
        "serve",
        "--listen",
        "tcp://127.0.0.1:0",
        "--insecure-no-auth",
        "--http",
        "127.0.0.1:0",
        "--http-open",
    ];
    args.extend_from_slice(more);
    let serve = Hopper::start(db, "", &args)?;
    let endpoint = serve_endpoint(&serve.line_with("listening on", Duration::from_secs(30))?)?;
    let line = serve.line_with("HTTP API on http://", Duration::from_secs(30))?;
    let (_, addr) = http_address(&line)?;
    Ok((serve, endpoint, addr))
}

/// The scheme and the address (`host:port`) in `hopper serve`'s "HTTP API on …" line.
pub fn http_address(line: &str) -> anyhow::Result<(String, String)> {
    let url = line.split("HTTP API on ").nth(1).unwrap_or_default();
    let (scheme, rest) = url.split_once("://").unwrap_or_default();
    let addr = rest.split('/').next().unwrap_or_default();
    anyhow::ensure!(!addr.is_empty(), "no HTTP address in {line:?}");
    Ok((scheme.to_owned(), addr.to_owned()))
}

/// `METHOD path` on `addr` with no body, its answer read within `read_timeout`: the whole
/// response (status line, headers, body).
pub fn http_request(
    addr: &str,
    method: &str,
    path: &str,
    read_timeout: Duration,
) -> anyhow::Result<String> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(read_timeout))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    Ok(response)
}

/// The value of the Prometheus sample `name` (labels included) on the `/metrics` of the
/// plain HTTP server at `addr` (opened with `--http-open`).
pub fn metric(addr: &str, name: &str) -> anyhow::Result<Option<f64>> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(20)))?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes())?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer
        .lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok()))
}

/// Waits until a statement on `db` whose text is `LIKE` `pattern` waits on a lock
/// (`pg_stat_activity`), at most 20 s; `what` names the statement in the failure.
pub async fn wait_for_a_lock_wait(
    db: &TestDatabase,
    pattern: &str,
    what: &str,
) -> anyhow::Result<()> {
    let (client, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let started = std::time::Instant::now();
    loop {
        let row = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND wait_event_type = 'Lock' AND query LIKE $1",
                &[&pattern],
            )
            .await?;
        if row.get::<_, i64>(0) > 0 {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(20),
            "{what} never waited on the lock"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A connection of its own holding `db`'s jobs table locked (`ACCESS EXCLUSIVE`, in a
/// transaction) until the caller runs `COMMIT` on it.
pub async fn lock_the_jobs_table(db: &TestDatabase) -> anyhow::Result<tokio_postgres::Client> {
    let (holder, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let schema = db.schema().replace('"', "\"\"");
    holder
        .batch_execute(&format!(
            "BEGIN; LOCK TABLE \"{schema}\".jobs IN ACCESS EXCLUSIVE MODE"
        ))
        .await?;
    Ok(holder)
}
