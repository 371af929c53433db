//! `hopper serve`'s own metrics on its `/metrics`: the outcomes its remote workers report
//! (the only job counts of Python and Node workers), its peers and their orders, and the
//! hellos it refuses.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{metric, serve_open_http};
use hopper::NewJob;
use hopper::testing::TestDatabase;

/// Waits up to 30 s for `name` on `addr` to read `want`; what it read last otherwise.
fn wait_for_sample(addr: &str, name: &str, want: f64) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let got = metric(addr, name)?;
        if got == Some(want) {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(30),
            "{name} read {got:?}, not {want}"
        );
        // A heartbeat period of the server below: the gauges are set once per period.
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_counts_its_peers_orders_outcomes_and_refused_hellos() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let timing = [
        "--heartbeat",
        "100ms",
        "--lease",
        "2s",
        "--node-dead-after",
        "2s",
    ];
    let (_serve, endpoint, addr) = serve_open_http(&db, &timing)?;
    let worker = |concurrency: &str| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_hopper"));
        command
            .args(["--database-url", &endpoint, "worker", "--queue", "metrics"])
            .args(["--concurrency", concurrency])
            .env_remove("HOPPER_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        command
    };
    // A worker whose hello is over the server's bounds is refused.
    let refused = worker("10001").output()?;
    assert!(
        !refused.status.success(),
        "a worker of 10,001 slots said hello"
    );
    let hellos = r#"hopper_server_hellos_refused_total{reason="invalid"}"#;
    assert_eq!(metric(&addr, hellos)?, Some(1.0));

    let mut running = worker("4").spawn()?;
    let jobs: Vec<NewJob> = (0..25)
        .map(|n| NewJob::new("bench", serde_json::json!({ "n": n })).with_queue("metrics"))
        .collect();
    db.backend().job_insert_many(&jobs).await?;
    db.wait_for("metrics", Duration::from_secs(30), |s| s.completed == 25)
        .await?;
    let completed = r#"hopper_server_outcomes_total{outcome="completed"}"#;
    wait_for_sample(&addr, completed, 25.0)?;
    wait_for_sample(&addr, r#"hopper_server_peers{role="worker"}"#, 1.0)?;
    wait_for_sample(&addr, "hopper_server_orders", 0.0)?;
    let _ = running.kill();
    let _ = running.wait();
    Ok(())
}
