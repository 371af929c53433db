//! `hopper serve` and `hopper worker` raise their soft open-files limit to the hard limit
//! when they start (each connection costs descriptors), and say so once. Both are started
//! with a soft limit of 256, and their limit is read from /proc once they run.

use std::time::Duration;

use crate::common::Hopper;
use hopper::testing::TestDatabase;

/// Starts `hopper ARGS` with a soft open-files limit of 256 and reads its output until a
/// line holds `ready`; answers the process and the line that logged the limit.
fn start(db: &TestDatabase, args: &[&str], ready: &str) -> anyhow::Result<(Hopper, String)> {
    let hopper = Hopper::start(db, "ulimit -Sn 256", args)?;
    let logged = hopper.line_with("open files limit", Duration::from_secs(30))?;
    if ready != "open files limit" {
        hopper.line_with(ready, Duration::from_secs(30))?;
    }
    Ok((hopper, logged))
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

fn check(what: &str, process: &Hopper, logged: &str) -> anyhow::Result<()> {
    let (soft, hard) = limits(process.child.id())?;
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
