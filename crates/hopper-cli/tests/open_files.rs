//! `hopper serve` and `hopper worker` raise their soft open-files limit to the hard limit
//! when they start (each connection costs descriptors), and say so once. Both are started
//! with a soft limit of 256, and their limit is read from /proc once they run.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hopper::testing::TestDatabase;

/// Kills the child on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `hopper ARGS` with a soft open-files limit of 256 and reads its stderr until a
/// line holds `ready`; answers the process and the line that logged the limit.
fn start(db: &TestDatabase, args: &[&str], ready: &str) -> anyhow::Result<(Running, String)> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -Sn 256 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_hopper"))
        .args(args)
        .env("DATABASE_URL", db.url())
        .env("HOPPER_SCHEMA", db.schema())
        .env("HOPPER_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stderr"))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let running = Running(child);
    let (tx, rx) = std::sync::mpsc::channel();
    for out in [
        Box::new(stderr) as Box<dyn std::io::Read + Send>,
        Box::new(stdout),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    let mut logged = String::new();
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| anyhow::anyhow!("never ready; limit line: {logged:?}"))?;
        if line.contains("open files limit") {
            logged = line.clone();
        }
        if line.contains(ready) {
            return Ok((running, logged));
        }
    }
}

/// The soft and hard "Max open files" of `pid`.
fn limits(pid: u32) -> anyhow::Result<(String, String)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits"))?;
    let line = text
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .ok_or_else(|| anyhow::anyhow!("no open files line"))?;
    let mut fields = line.split_whitespace().skip(3);
    let soft = fields.next().unwrap_or_default().to_owned();
    let hard = fields.next().unwrap_or_default().to_owned();
    Ok((soft, hard))
}

fn check(what: &str, process: &Running, logged: &str) -> anyhow::Result<()> {
    let (soft, hard) = limits(process.0.id())?;
    assert_eq!(
        soft, hard,
        "{what}: the soft limit was raised to the hard one"
    );
    assert!(logged.contains("before=256"), "{what}: {logged}");
    Ok(())
}

#[tokio::test]
async fn serve_and_worker_raise_the_soft_open_files_limit() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let (serve, logged) = start(
        &db,
        &[
            "serve",
            "--listen",
            "tcp://127.0.0.1:0",
            "--insecure-no-auth",
        ],
        "listening on",
    )?;
    check("serve", &serve, &logged)?;
    let (worker, logged) = start(
        &db,
        &["worker", "--queue", "q", "--concurrency", "1"],
        "open files limit",
    )?;
    check("worker", &worker, &logged)?;
    Ok(())
}
