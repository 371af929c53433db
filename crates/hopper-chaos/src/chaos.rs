//! `hopper-chaos chaos`: jobs enqueued at a steady rate and run by direct worker processes
//! (on the database) and remote ones (through `hopper serve`, behind a faulty proxy), while
//! every 2–5 s one of them or the server is SIGKILLed and started again, PostgreSQL is
//! restarted once, and an application keeps holding running jobs' rows (`holder.rs`). Then every job must be completed exactly once as the queue sees it, and
//! every extra run explained by a superseded lease (`report.rs`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use hopper::backend::Backend;
use hopper::{PgBackend, PgOptions};
use tokio::time::Instant;

use crate::db::RunDatabase;
use crate::holder::Holds;
use crate::processes::Managed;
use crate::proxy::{self, Faults, ProxyStats};
use crate::report::Report;

/// The sizes of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Profile {
    /// 5,000 jobs at 100/s, 2 direct + 2 remote workers: about a minute (CI).
    Short,
    /// 100,000 jobs at 400/s, 3 direct + 3 remote workers: about five minutes.
    Long,
}

/// `hopper-chaos chaos`.
#[derive(Debug, Args)]
pub struct ChaosArgs {
    /// The sizes of the run; the options below override them.
    #[arg(long, value_enum, default_value = "short")]
    pub profile: Profile,
    /// Jobs to enqueue.
    #[arg(long)]
    pub jobs: Option<u64>,
    /// Jobs enqueued per second.
    #[arg(long)]
    pub rate: Option<u64>,
    /// Worker processes on the database.
    #[arg(long)]
    pub direct: Option<usize>,
    /// Worker processes through `hopper serve` and the proxy.
    #[arg(long)]
    pub remote: Option<usize>,
    /// Jobs each worker process runs at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// The shell command that restarts PostgreSQL once mid-run ("none": no restart).
    #[arg(
        long,
        default_value = "pg_ctlcluster --skip-systemctl-redirect 15 main restart"
    )]
    pub pg_restart: String,
    /// The `hopper` binary that serves (default: `hopper` beside this binary).
    #[arg(long)]
    pub hopper_bin: Option<PathBuf>,
    /// Longest wait, after the chaos stops, for the last jobs to complete.
    #[arg(long, default_value_t = 180)]
    pub drain_timeout_secs: u64,
    /// Where the processes' logs go (default: target/chaos/<database>).
    #[arg(long)]
    pub log_dir: Option<PathBuf>,
}

/// The run's shape once the profile and the options are combined.
#[derive(Debug, Clone)]
struct Plan {
    jobs: u64,
    rate: u64,
    direct: usize,
    remote: usize,
}

impl ChaosArgs {
    fn plan(&self) -> Plan {
        let (jobs, rate, direct, remote) = match self.profile {
            Profile::Short => (5_000, 100, 2, 2),
            Profile::Long => (100_000, 400, 3, 3),
        };
        Plan {
            jobs: self.jobs.unwrap_or(jobs),
            rate: self.rate.unwrap_or(rate).max(1),
            direct: self.direct.unwrap_or(direct),
            remote: self.remote.unwrap_or(remote),
        }
    }
}

/// The kills, restarts and exits of a run.
#[derive(Debug, Default)]
struct Tally {
    kills: u32,
    server_kills: u32,
    unexpected_exits: u32,
    pg_restarts: u32,
}

/// Runs the chaos; true if the report passes.
pub async fn run(admin_url: &str, keep: bool, args: ChaosArgs) -> anyhow::Result<bool> {
    let plan = args.plan();
    let hopper_bin = hopper_binary(args.hopper_bin.as_deref())?;
    let db = RunDatabase::create(admin_url, "chaos").await?;
    let log_dir = args
        .log_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("target/chaos").join(&db.name));
    std::fs::create_dir_all(&log_dir).with_context(|| format!("creating {}", log_dir.display()))?;
    println!(
        "chaos: {} jobs at {}/s, {} direct + {} remote workers (concurrency {}), database {}, logs in {}",
        plan.jobs,
        plan.rate,
        plan.direct,
        plan.remote,
        args.concurrency,
        db.name,
        log_dir.display()
    );
    let result = run_in(&db, &plan, &args, &hopper_bin, &log_dir).await;
    let passed = match result {
        Ok(report) => {
            println!("{report}");
            report.passed()
        }
        Err(e) => {
            db.finish(true).await?;
            return Err(e);
        }
    };
    db.finish(keep || !passed).await?;
    Ok(passed)
}

/// `hopper` beside this binary, unless given.
fn hopper_binary(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let path = match given {
        Some(path) => path.to_owned(),
        None => std::env::current_exe()?
            .parent()
            .context("this binary has no directory")?
            .join("hopper"),
    };
    anyhow::ensure!(
        path.exists(),
        "no hopper binary at {} (build it with `cargo build -p hopper-cli` in the same profile, or pass --hopper-bin)",
        path.display()
    );
    Ok(path)
}

async fn run_in(
    db: &RunDatabase,
    plan: &Plan,
    args: &ChaosArgs,
    hopper_bin: &Path,
    log_dir: &Path,
) -> anyhow::Result<Report> {
    let backend = PgBackend::connect(&db.url, PgOptions::default()).await?;
    backend.migrate().await?;
    crate::db::connect(&db.url)
        .await?
        .batch_execute(include_str!("sql/setup.sql"))
        .await
        .context("creating the chaos tables")?;

    let token = format!("{:032x}", rand::random::<u128>());
    let token_file = log_dir.join("serve.token");
    write_private(&token_file, &token)?;
    let server_addr = free_port()?;
    let proxy_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let proxy_addr = proxy_listener.local_addr()?;
    let proxy_stats = Arc::new(ProxyStats::default());
    let faults = Faults {
        every_ms: 2_000..=8_000,
        drop_chance: 0.4,
        stall_ms: 300..=3_000,
    };
    let proxy_task = tokio::spawn(proxy::run(
        proxy_listener,
        server_addr,
        faults,
        proxy_stats.clone(),
    ));

    let mut processes = Vec::new();
    processes.push(server_process(
        hopper_bin,
        &db.url,
        server_addr,
        &token_file,
        log_dir,
    ));
    let me = std::env::current_exe()?;
    for i in 1..=plan.direct {
        let name = format!("direct-{i}");
        processes.push(worker_process(&me, &name, &db.url, &db.url, args, log_dir));
    }
    for i in 1..=plan.remote {
        let name = format!("remote-{i}");
        let url = format!("tcp://{proxy_addr}?token={token}&name={name}");
        processes.push(worker_process(&me, &name, &db.url, &url, args, log_dir));
    }
    // The server first: remote workers that find nobody listening exit (and would be
    // counted as exits nobody asked for).
    processes[0].start()?;
    wait_for_listener(server_addr, Duration::from_secs(60)).await?;
    for p in processes.iter_mut().skip(1) {
        p.start()?;
    }

    let enqueued = Arc::new(AtomicU64::new(0));
    let enqueuer = tokio::spawn(crate::enqueue::run(
        backend.clone(),
        plan.jobs,
        plan.rate,
        enqueued.clone(),
    ));
    let (holding, holds) = (Arc::new(AtomicBool::new(true)), Arc::new(Holds::default()));
    let holder = tokio::spawn(crate::holder::run(
        db.url.clone(),
        holding.clone(),
        holds.clone(),
    ));
    let faults = Running {
        processes: &mut processes,
        holding: &holding,
    };
    let outcome = drive(db, plan, args, faults, &enqueued, &proxy_stats).await;
    holder.abort();
    for p in &mut processes {
        p.kill().await;
    }
    proxy_task.abort();
    enqueuer.abort();
    let tally = outcome?;
    println!(
        "faults: {} SIGKILLs ({} of the server), {} PostgreSQL restarts, {} exits nobody asked for, \
         {} holds of running rows, {} of node rows; proxy: {} connections, {} dropped, {} stalled",
        tally.kills,
        tally.server_kills,
        tally.pg_restarts,
        tally.unexpected_exits,
        holds.jobs.load(Ordering::Relaxed),
        holds.nodes.load(Ordering::Relaxed),
        proxy_stats.connections.load(Ordering::Relaxed),
        proxy_stats.drops.load(Ordering::Relaxed),
        proxy_stats.stalls.load(Ordering::Relaxed),
    );
    let client = crate::db::connect(&db.url).await?;
    Report::read(&client).await
}

/// What the chaos loop acts on: the processes it kills, and the row holder it stops when
/// the chaos is over.
struct Running<'a> {
    processes: &'a mut [Managed],
    holding: &'a AtomicBool,
}

/// The chaos loop, then the quiet drain.
async fn drive(
    db: &RunDatabase,
    plan: &Plan,
    args: &ChaosArgs,
    running: Running<'_>,
    enqueued: &AtomicU64,
    proxy_stats: &ProxyStats,
) -> anyhow::Result<Tally> {
    let Running { processes, holding } = running;
    let pool = crate::db::pool(&db.url, 1)?;
    let mut tally = Tally::default();
    let started = Instant::now();
    let mut next_kill = started + kill_gap();
    let mut restart_pg = (args.pg_restart != "none").then(|| args.pg_restart.clone());
    let mut pg_task: Option<tokio::task::JoinHandle<()>> = None;
    let mut enqueue_done_at: Option<Instant> = None;
    let mut chaos_over_at: Option<Instant> = None;
    let mut last_print = started;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tick.tick().await;
        let now = Instant::now();
        for p in processes.iter_mut() {
            if let Some(status) = p.exited() {
                tally.unexpected_exits += 1;
                eprintln!("{} exited by itself ({status}); starting it again", p.name);
            }
            if p.is_down() {
                p.start()?;
            }
        }
        let done = enqueued.load(Ordering::Relaxed);
        if done >= plan.jobs && enqueue_done_at.is_none() {
            enqueue_done_at = Some(now);
        }
        // The database restart, once, when 40% of the jobs are in.
        if done * 10 >= plan.jobs * 4
            && let Some(command) = restart_pg.take()
        {
            tally.pg_restarts += 1;
            println!("{:>5.0}s restarting PostgreSQL: {command}", secs(started));
            pg_task = Some(tokio::spawn(restart(command)));
        }
        let pg_busy = pg_task.as_ref().is_some_and(|t| !t.is_finished());
        // The chaos lasts while jobs are enqueued, the database restart, and 10 s more.
        let chaos = match chaos_over_at {
            Some(_) => false,
            None => {
                let tail_over = enqueue_done_at
                    .is_some_and(|at| now >= at + Duration::from_secs(10))
                    && restart_pg.is_none()
                    && !pg_busy;
                if tail_over {
                    chaos_over_at = Some(now);
                    holding.store(false, Ordering::Relaxed);
                    println!("{:>5.0}s chaos over; draining", secs(started));
                }
                !tail_over
            }
        };
        if chaos && now >= next_kill && !processes.is_empty() {
            // Every fourth kill is the server's (it is one process of several, and a
            // run short enough for CI must still kill it); the others are at random.
            let victim = if tally.kills % 4 == 1 || processes.len() == 1 {
                0
            } else {
                rand::random_range(1..processes.len())
            };
            let p = &mut processes[victim];
            p.kill().await;
            tally.kills += 1;
            if victim == 0 {
                tally.server_kills += 1;
            }
            p.start()?;
            next_kill = now + kill_gap();
        }
        let completed = completed(&pool).await;
        if now.duration_since(last_print) >= Duration::from_secs(5) {
            last_print = now;
            println!(
                "{:>5.0}s enqueued {done}, completed {}, kills {}, proxy drops {} stalls {}",
                secs(started),
                completed.map_or_else(|| "?".to_owned(), |c| c.to_string()),
                tally.kills,
                proxy_stats.drops.load(Ordering::Relaxed),
                proxy_stats.stalls.load(Ordering::Relaxed),
            );
        }
        if chaos_over_at.is_some() && completed == Some(plan.jobs) {
            println!("{:>5.0}s every job completed", secs(started));
            return Ok(tally);
        }
        if let Some(over) = chaos_over_at
            && now >= over + Duration::from_secs(args.drain_timeout_secs)
        {
            println!(
                "{:>5.0}s gave up waiting after {} s of drain",
                secs(started),
                args.drain_timeout_secs
            );
            return Ok(tally);
        }
    }
}

fn secs(since: Instant) -> f64 {
    since.elapsed().as_secs_f64()
}

/// 2 to 5 s.
fn kill_gap() -> Duration {
    Duration::from_millis(rand::random_range(2_000..=5_000))
}

/// Completed expected jobs (`None` while the database cannot say, e.g. restarting).
async fn completed(pool: &deadpool_postgres::Pool) -> Option<u64> {
    let client = pool.get().await.ok()?;
    let row = client
        .query_one(include_str!("sql/progress.sql"), &[])
        .await
        .ok()?;
    u64::try_from(row.get::<_, i64>(1)).ok()
}

/// Runs the restart command, saying how long it took.
async fn restart(command: String) {
    let started = Instant::now();
    let status = tokio::process::Command::new("sh")
        .args(["-c", &command])
        .status()
        .await;
    match status {
        Ok(s) if s.success() => println!(
            "      PostgreSQL restarted in {:.1} s",
            started.elapsed().as_secs_f64()
        ),
        Ok(s) => eprintln!("the restart command failed: {s}"),
        Err(e) => eprintln!("the restart command did not run: {e}"),
    }
}

fn server_process(
    hopper_bin: &Path,
    url: &str,
    addr: SocketAddr,
    token_file: &Path,
    log_dir: &Path,
) -> Managed {
    // One node id for every incarnation, as a deployment's stable id would be.
    let node_id = uuid::Uuid::now_v7().to_string();
    let args = [
        "--database-url",
        url,
        "serve",
        "--listen",
        &format!("tcp://{addr}"),
        "--token-file",
        &token_file.display().to_string(),
        "--heartbeat",
        "500ms",
        "--lease",
        "5s",
        "--node-dead-after",
        "5s",
        "--node-id",
        &node_id,
        "--pool-size",
        "4",
    ]
    .map(str::to_owned)
    .to_vec();
    Managed::new(
        "server",
        hopper_bin.to_owned(),
        args,
        log_dir.join("server.log"),
    )
}

fn worker_process(
    me: &Path,
    name: &str,
    record_url: &str,
    backend: &str,
    args: &ChaosArgs,
    log_dir: &Path,
) -> Managed {
    let argv = [
        "worker",
        "--record-url",
        record_url,
        "--backend",
        backend,
        "--name",
        name,
        "--concurrency",
        &args.concurrency.to_string(),
        "--lease-secs",
        "5",
    ]
    .map(str::to_owned)
    .to_vec();
    Managed::new(
        name,
        me.to_owned(),
        argv,
        log_dir.join(format!("{name}.log")),
    )
}

/// Waits until something accepts connections at `addr`.
async fn wait_for_listener(addr: SocketAddr, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the server did not listen on {addr} within {within:?} (see its log)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// A loopback port free right now (the server binds it a moment later).
fn free_port() -> anyhow::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?)
}

/// Writes `text` to a file only this user can read.
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    writeln!(file, "{text}")?;
    Ok(())
}
