//! `hopper serve` with its HTTP endpoint, made unhealthy by real means: `/health` answers 200
//! while every supervised task runs; once the promoter's table is renamed away in the
//! test's own schema, the promoter fails at each run, the supervisor gives up after its
//! failure budget, `/health` answers 503 naming the task, and the process exits non-zero.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hopper::testing::TestDatabase;

/// Kills the child on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `GET /health` on `addr`: the status code and the body.
fn health(addr: &str) -> anyhow::Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no status line: {response:?}"))?;
    let body = response
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    Ok((code, body))
}

/// Polls `/health` until `done(code, body)`, for at most `limit`.
fn health_until(
    addr: &str,
    limit: Duration,
    done: impl Fn(u16, &str) -> bool,
) -> anyhow::Result<(u16, String)> {
    let start = Instant::now();
    loop {
        let (code, body) = health(addr)?;
        if done(code, &body) {
            return Ok((code, body));
        }
        anyhow::ensure!(
            start.elapsed() < limit,
            "still {code} {body} after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test]
async fn a_task_that_keeps_failing_makes_serve_unhealthy_and_exit() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args([
            "serve",
            "--listen",
            "tcp://127.0.0.1:0",
            "--insecure-no-auth",
        ])
        .args(["--http", "127.0.0.1:0", "--http-open"])
        .env("DATABASE_URL", db.url())
        .env("HOPPER_SCHEMA", db.schema())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stderr"))?;
    let mut serve = Running(child);
    let mut lines = BufReader::new(stderr).lines();
    let mut addr = String::new();
    for line in lines.by_ref() {
        if let Some(rest) = line?.split("HTTP API on http://").nth(1) {
            addr = rest.split('/').next().unwrap_or_default().to_owned();
            break;
        }
    }
    anyhow::ensure!(!addr.is_empty(), "hopper serve printed no HTTP address");
    let log = std::thread::spawn(move || {
        lines
            .map_while(Result::ok)
            .filter(|l| l.contains("promoter"))
            .collect::<Vec<_>>()
    });

    let (code, body) = health(&addr)?;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"ok\""), "{body}");

    // The promoter's table goes away (in this test's own schema): every promotion fails.
    let (client, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    client
        .batch_execute(&format!(
            "ALTER TABLE {}.jobs RENAME TO jobs_gone",
            db.schema()
        ))
        .await?;

    // Five failures with backoff (0.1 + 0.2 + 0.4 + 0.8 s) then 503 until the server has
    // stopped its tasks; polled often enough to see it.
    let (_, body) = health_until(&addr, Duration::from_secs(30), |code, _| code != 200)
        .map_err(|e| anyhow::anyhow!("no 503 seen before the process exited: {e}"))?;
    assert!(body.contains("\"unhealthy\""), "{body}");
    assert!(body.contains("\"promoter\""), "the task is named: {body}");

    let start = Instant::now();
    let status = loop {
        if let Some(status) = serve.0.try_wait()? {
            break status;
        }
        anyhow::ensure!(start.elapsed() < Duration::from_secs(30), "never exited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(!status.success(), "exits non-zero: {status:?}");
    let said = log
        .join()
        .map_err(|_| anyhow::anyhow!("log reader panicked"))?;
    assert!(
        said.iter().any(|l| l.contains("giving up")),
        "the log says so: {said:?}"
    );
    Ok(())
}
