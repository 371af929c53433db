//! W7: the drain and the enqueue→start latency through `hopper serve`.
//!
//! The server runs in this process (`hopper_server::Server`, as `hopper serve` runs it) on
//! a loopback port with a fresh token and node id, on the bench's database.
//!
//! - `server-drain` (W7): [`WORKERS`] worker processes (`hopper worker`, children of this
//!   binary) with `--concurrency` each drain every unfinished bench job through the server.
//!   The time runs from the moment every worker is connected and told to start until the
//!   database counts none unfinished, as W3's does.
//! - `server-latency`: W4 through the server: one idle worker (a runtime on a remote
//!   backend, in this process) and jobs submitted one at a time through the same
//!   connection at W4's rate; each job carries its submit time and the handler records how
//!   long after it it started.
//! - `server`: the comparison, in one run: W1 then W3 (direct, one process), W1 then W7,
//!   then the latency through the server; it prints the ratio W7 / W3.

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use hopper::Client;
use hopper_server::{Auth, ServeConfig, Server, ServerHandle, ServerKeys};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::time::Instant;

use super::report::progress;
use super::{Bench, Report, db};

/// Remote worker processes of W7.
pub const WORKERS: usize = 4;

/// How long a worker process may take to connect, and to stop once told.
const START_STOP: Duration = Duration::from_secs(30);

/// A server on a free loopback port, with CURVE if the bench asks for it (then also its
/// public key).
async fn start_server(
    bench: &Bench,
    token: &str,
) -> anyhow::Result<(ServerHandle, Option<String>)> {
    let mut config = ServeConfig::new(
        bench.client.backend().clone(),
        "tcp://127.0.0.1:0",
        Auth::Tokens(vec![token.to_owned()]),
    );
    config.node_id = uuid::Uuid::now_v7();
    config.node_name = format!("hopper-bench serve:{}", std::process::id());
    if bench.curve {
        config.curve = Some(ServerKeys::generate().context("making a CURVE key pair")?);
    }
    let key = config.curve.as_ref().map(|k| k.public.clone());
    let server = Server::start(config).await.context("starting the server")?;
    Ok((server, key))
}

/// A worker child process, waiting for the word to start.
struct WorkerProcess {
    child: Child,
    stdin: Option<ChildStdin>,
}

/// Starts `n` `hopper worker` processes against `endpoint` and waits until each is
/// connected.
async fn spawn_workers(
    bench: &Bench,
    peer: &Peer<'_>,
    n: usize,
) -> anyhow::Result<Vec<WorkerProcess>> {
    let exe = std::env::current_exe().context("finding the hopper binary")?;
    let mut workers = Vec::with_capacity(n);
    for i in 0..n {
        let mut command = Command::new(&exe);
        if let Some(key) = peer.server_key {
            command.env("HOPPER_SERVER_KEY", key);
        }
        let endpoint = peer.endpoint;
        let mut child = command
            .arg("--database-url")
            .arg(format!("{endpoint}?name=bench-worker-{i}"))
            .args(["worker", "--queue", super::QUEUE, "--stdin-control"])
            .arg("--concurrency")
            .arg(bench.concurrency.to_string())
            .arg("--work-ms")
            .arg(bench.work.as_millis().to_string())
            .arg("--log-lines")
            .arg(bench.log_lines.to_string())
            .env("HOPPER_TOKEN", peer.token)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting a worker process")?;
        let stdout = child.stdout.take().context("the worker's stdout")?;
        let stdin = child.stdin.take();
        workers.push((child, stdin, BufReader::new(stdout).lines()));
    }
    let mut ready = Vec::with_capacity(n);
    for (child, stdin, mut lines) in workers {
        let line = tokio::time::timeout(START_STOP, lines.next_line())
            .await
            .context("a worker process did not connect within 30 s")?
            .context("reading a worker's stdout")?;
        if line.as_deref() != Some("ready") {
            anyhow::bail!("a worker process did not start (it said {line:?})");
        }
        ready.push(WorkerProcess { child, stdin });
    }
    Ok(ready)
}

/// Tells each worker to stop (closes its stdin) and waits for it; kills a laggard.
async fn stop_workers(workers: Vec<WorkerProcess>) {
    let mut children = Vec::with_capacity(workers.len());
    for mut w in workers {
        drop(w.stdin.take());
        children.push(w.child);
    }
    for mut child in children {
        match tokio::time::timeout(START_STOP, child.wait()).await {
            Ok(Ok(status)) if !status.success() => {
                tracing::warn!(%status, "a bench worker process failed");
            }
            Ok(_) => {}
            Err(_) => {
                tracing::warn!("a bench worker process did not stop; killing it");
                let _ = child.kill().await;
            }
        }
    }
}

/// W7: drains every unfinished bench job with [`WORKERS`] worker processes through an
/// in-process server.
pub async fn drain(bench: &Bench) -> anyhow::Result<Report> {
    let jobs = db::unfinished(&bench.client).await?;
    let token = hopper_server::generate_token();
    let (server, key) = start_server(bench, &token).await?;
    let peer = Peer {
        endpoint: server.endpoint(),
        token: &token,
        server_key: key.as_deref(),
    };
    let result = drain_through(bench, &peer, jobs).await;
    server.shutdown().await;
    let seconds = result?;
    let mut report = Report::new("server-drain", "W7", jobs, seconds);
    report.concurrency = Some(bench.concurrency * WORKERS);
    Ok(report)
}

/// What a worker process needs to reach the server.
struct Peer<'a> {
    endpoint: &'a str,
    token: &'a str,
    server_key: Option<&'a str>,
}

async fn drain_through(bench: &Bench, peer: &Peer<'_>, jobs: u64) -> anyhow::Result<f64> {
    let mut workers = spawn_workers(bench, peer, WORKERS).await?;
    let bar = progress(jobs, "W7 drain", bench.json);
    let started = Instant::now();
    let mut go = Ok(());
    for w in &mut workers {
        if let Some(stdin) = &mut w.stdin {
            go = go.and(stdin.write_all(b"go\n").await);
        }
    }
    let waited = match go.context("starting the worker processes") {
        Ok(()) => super::drain::wait_until_drained(bench, jobs, &bar).await,
        Err(e) => Err(e),
    };
    let seconds = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    stop_workers(workers).await;
    waited?;
    Ok(seconds)
}

/// Enqueue→start latency through the server: W4 (an idle runtime, one job enqueued at a
/// time at [`super::latency::RATE`] per second) with the runtime and the enqueueing on one
/// remote backend, the server's.
pub async fn latency(bench: &Bench, jobs: u64) -> anyhow::Result<Report> {
    let token = hopper_server::generate_token();
    let (server, key) = start_server(bench, &token).await?;
    let url = format!("{}?token={token}&name=bench-latency", server.endpoint());
    let options = hopper::RemoteOptions::from_url(&url).map(|mut o| {
        o.server_key = key;
        o
    });
    let connected = match options {
        Ok(options) => hopper::RemoteBackend::connect(options)
            .await
            .map(|b| std::sync::Arc::new(b) as std::sync::Arc<dyn hopper::backend::Backend>),
        Err(e) => Err(e),
    };
    let result = match connected {
        Ok(remote) => {
            let through = Bench {
                client: Client::new(remote),
                concurrency: bench.concurrency,
                work: bench.work,
                log_lines: bench.log_lines,
                job_timeout: bench.job_timeout,
                tuning: bench.tuning,
                json: bench.json,
                curve: bench.curve,
            };
            super::latency::run(&through, jobs).await
        }
        Err(e) => Err(anyhow::Error::new(e).context("connecting to the server")),
    };
    server.shutdown().await;
    let mut report = result?;
    report.workload = "server-latency";
    report.id = "W7";
    Ok(report)
}

/// The comparison in one run: W1 + W3, W1 + W7, then the latency through the server;
/// prints each, then the ratio W7 / W3.
pub async fn compare(bench: &Bench, jobs: u64, latency_jobs: u64) -> anyhow::Result<()> {
    super::clear(bench).await?;
    bench.print(&super::enqueue::bulk(bench, jobs).await?);
    db::vacuum(&bench.client).await?;
    let direct = super::drain::run(bench).await?;
    bench.print(&direct);
    super::clear(bench).await?;
    bench.print(&super::enqueue::bulk(bench, jobs).await?);
    db::vacuum(&bench.client).await?;
    let remote = drain(bench).await?;
    bench.print(&remote);
    let ratio = if direct.jobs_per_sec > 0.0 {
        remote.jobs_per_sec / direct.jobs_per_sec
    } else {
        0.0
    };
    if bench.json {
        println!(
            "{}",
            serde_json::json!({"workload": "server-vs-direct", "id": "W7/W3", "ratio": ratio})
        );
    } else {
        println!("W7/W3 ratio {ratio:.2} (server drain over direct drain, same run)");
    }
    super::clear(bench).await?;
    db::vacuum(&bench.client).await?;
    bench.print(&latency(bench, latency_jobs).await?);
    Ok(())
}
