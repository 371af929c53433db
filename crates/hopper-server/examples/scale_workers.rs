//! N encrypted workers on one `hopper serve`, from one light process (issue 19, "Done
//! when"; docs/benchmarks.md, "5,000 encrypted workers").
//!
//! ```sh
//! cargo build --release -p hopper-cli --example scale_workers -p hopper-server
//! HOPPER_BIN=target/release/hopper DATABASE_URL=postgres://… \
//!     target/release/examples/scale_workers [N=5000] [RATE=200] [SECONDS=20] [--json]
//! ```
//!
//! Starts `HOPPER_BIN --schema <fresh> serve --curve --pool-size 8` on a free loopback port,
//! its database URL carrying an `application_name` of its own, then connects N worker
//! sessions over CURVE: each a DEALER socket with a key pair of its own, a `hello` as a
//! worker of concurrency 1 on queue `default` and kind `scale` (said again after 10 s
//! without a welcome), heartbeats at 0.8 of the period the welcome gives, spread over that
//! period, and a `completed` sent as soon as an order arrives. With every session welcomed,
//! one more CURVE client submits RATE jobs a second for SECONDS, on a fixed schedule
//! (without waiting for each reply), each job carrying its submit time; the session that
//! gets the order records how long after that it arrived (the dispatch latency: submit,
//! insert, commit, claim, push, both encryptions). Meanwhile it samples every 0.5 s the
//! server's database connections (rows of `pg_stat_activity` with its `application_name`)
//! and RSS, and at the end it waits for every job to be `completed` in the table.
//!
//! Everything runs on one thread: a tokio current-thread runtime whose tasks (one per
//! session) wait on their socket's `ZMQ_FD` through `AsyncFd`, so a wake-up costs the
//! sockets that have something, not a pass over all N (as a `zmq_poll` over N items
//! would). libzmq adds its own I/O and reaper threads, one pair per context of at most
//! 1,000 sockets (the `zmq` crate cannot raise `ZMQ_MAX_SOCKETS`, 1,023 by default).
//!
//! `ZMQ_FD` is a notification, not a level: it signals when the socket's state may have
//! changed, and a send or a `ZMQ_EVENTS` read can consume the signal while a message
//! waits. So each task reads until `EAGAIN` after every wake-up and every send, and only
//! clears the readiness when `ZMQ_EVENTS` has no `POLLIN`.
//!
//! `tests/load/scale_workers.py` does the same with Python workers (pyzmq, asyncio): the
//! cross-language check, at a much higher cost in CPU per session.

use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use hopper_protocol::{Completed, JobSpec, MAX_FRAME, Reply, Request, Role, decode_reply};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::time::{sleep_until, timeout};

/// The server's `application_name`, by which its database connections are counted.
const APP: &str = "hopper_scale_serve";
/// The kind of every job.
const KIND: &str = "scale";
/// Sockets per libzmq context: below its default `ZMQ_MAX_SOCKETS` (1,023).
const PER_CONTEXT: usize = 1_000;
/// Most submits without their reply: past it the submitter waits (the server refuses
/// requests past 1,024 in flight, and a queue of them measures nothing).
const MAX_IN_FLIGHT: u64 = 200;
/// A hello not answered in this long is said again.
const HELLO_AGAIN: Duration = Duration::from_secs(10);

/// What the command line asks for.
struct Options {
    workers: usize,
    rate: f64,
    seconds: f64,
    /// Sessions started per second while connecting (a steady stream of CURVE handshakes).
    connect_rate: f64,
    json: bool,
}

impl Options {
    fn parse() -> anyhow::Result<Options> {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let json = args.iter().any(|a| a == "--json");
        let mut connect_rate = 1_000.0;
        let mut positional = Vec::new();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--json" => {}
                "--connect-rate" => {
                    connect_rate = it
                        .next()
                        .ok_or_else(|| anyhow!("--connect-rate needs a number"))?
                        .parse()?;
                }
                other if other.starts_with("--") => bail!(
                    "usage: scale_workers [N=5000] [RATE=200] [SECONDS=20] [--connect-rate 1000] [--json]"
                ),
                other => positional.push(other.to_owned()),
            }
        }
        let number = |i: usize, default: f64| -> anyhow::Result<f64> {
            match positional.get(i) {
                Some(s) => s.parse().with_context(|| format!("not a number: {s}")),
                None => Ok(default),
            }
        };
        let options = Options {
            workers: number(0, 5_000.0)? as usize,
            rate: number(1, 200.0)?,
            seconds: number(2, 20.0)?,
            connect_rate,
            json,
        };
        if options.rate <= 0.0 || options.seconds <= 0.0 || options.connect_rate <= 0.0 {
            bail!("RATE, SECONDS and --connect-rate must be above 0");
        }
        Ok(options)
    }
}

/// Counters shared by the sessions and the submitter.
#[derive(Default)]
struct Stats {
    welcomed: AtomicU64,
    hello_again: AtomicU64,
    session_lost: AtomicU64,
    orders: AtomicU64,
    acked: AtomicU64,
    errors: AtomicU64,
    submitted: AtomicU64,
    /// Submit to order, microseconds.
    latencies: Mutex<Vec<u64>>,
    /// Submit to `submitted`, microseconds.
    submit_rtts: Mutex<Vec<u64>>,
    /// By job number: when its `submitted` reply and its order arrived (microseconds from
    /// the origin, 0 if not), to split the latency at the reply.
    replied_at: Mutex<Vec<u64>>,
    ordered_at: Mutex<Vec<u64>>,
    first_error: Mutex<Option<String>>,
}

impl Stats {
    /// Records that job `n`, sent at `sent`, reached a step at `now`: the wait in `waits`,
    /// the instant in `at` (by job number).
    fn note(&self, waits: &Mutex<Vec<u64>>, at: &Mutex<Vec<u64>>, n: u64, sent: u64, now: u64) {
        if let Ok(mut w) = waits.lock() {
            w.push(now.saturating_sub(sent));
        }
        if let Some(slot) = at.lock().ok().as_mut().and_then(|a| a.get_mut(n as usize)) {
            *slot = now;
        }
    }

    fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut first) = self.first_error.lock() {
            first.get_or_insert(what);
        }
    }
}

/// What every session needs to connect.
struct Target {
    endpoint: String,
    server_key: String,
    token: String,
    /// The origin of the microsecond stamps in the jobs' arguments.
    origin: Instant,
    stats: Stats,
}

impl Target {
    fn now_us(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_micros()).unwrap_or(u64::MAX)
    }
}

/// A socket's `ZMQ_FD`, for `AsyncFd`.
struct ZmqFd(RawFd);

impl AsRawFd for ZmqFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// A CURVE DEALER with the readiness of its `ZMQ_FD`. `ready` is declared first so that
/// it is dropped (deregistered) while the socket, which owns the descriptor, is still open.
struct Session {
    ready: AsyncFd<ZmqFd>,
    socket: zmq::Socket,
}

impl Session {
    fn connect(ctx: &zmq::Context, target: &Target) -> anyhow::Result<Session> {
        let socket = ctx.socket(zmq::DEALER)?;
        socket.set_linger(0)?;
        let mine = zmq::CurveKeyPair::new()?;
        socket.set_curve_serverkey(target.server_key.as_bytes())?;
        socket.set_curve_publickey(&mine.public_key)?;
        socket.set_curve_secretkey(&mine.secret_key)?;
        socket.connect(&target.endpoint)?;
        // The safe constructor is deprecated because nothing ties the descriptor's life to
        // the `AsyncFd`; here the socket that owns it outlives it (see the struct), and the
        // workspace forbids the `unsafe` of `register_with_interest`.
        #[allow(deprecated)]
        let ready = AsyncFd::with_interest(ZmqFd(socket.get_fd()?), Interest::READABLE)?;
        Ok(Session { ready, socket })
    }

    fn send(&self, request: &Request) -> anyhow::Result<()> {
        let frame = hopper_protocol::encode(request).map_err(|e| anyhow!(e))?;
        self.socket.send(frame, zmq::DONTWAIT)?;
        Ok(())
    }

    /// A frame if one is waiting.
    fn try_recv(&self) -> anyhow::Result<Option<Vec<u8>>> {
        match self.socket.recv_bytes(zmq::DONTWAIT) {
            Ok(frame) => Ok(Some(frame)),
            Err(zmq::Error::EAGAIN) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Returns when the socket may have a frame (or the state to check changed).
    async fn readable(&self) -> anyhow::Result<()> {
        let mut guard = self.ready.readable().await?;
        if !self.socket.get_events()?.contains(zmq::POLLIN) {
            guard.clear_ready();
        }
        Ok(())
    }

    /// The next frame.
    async fn recv(&self) -> anyhow::Result<Vec<u8>> {
        loop {
            if let Some(frame) = self.try_recv()? {
                return Ok(frame);
            }
            self.readable().await?;
        }
    }

    /// Says `hello` until welcomed; returns the heartbeat period.
    async fn hello(&self, hello: &Request, stats: &Stats) -> anyhow::Result<Duration> {
        loop {
            self.send(hello)?;
            let Ok(frame) = timeout(HELLO_AGAIN, self.recv()).await else {
                stats.hello_again.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            return match decode_reply(&frame?, MAX_FRAME) {
                Ok(Reply::Welcome { heartbeat_ms, .. }) => Ok(Duration::from_millis(heartbeat_ms)),
                other => Err(anyhow!("hello answered with {other:?}")),
            };
        }
    }
}

/// One worker session: hello, then heartbeats and orders completed at once, forever.
async fn worker(target: Arc<Target>, ctx: zmq::Context, index: usize) -> anyhow::Result<()> {
    let session = Session::connect(&ctx, &target)?;
    let stats = &target.stats;
    let hello = Request::Hello {
        req: 1,
        version: hopper_protocol::VERSION,
        role: Role::Worker,
        token: Some(target.token.clone()),
        name: Some(format!("scale-{index}")),
        kinds: Some(vec![KIND.to_owned()]),
        queues: Some(vec!["default".to_owned()]),
        concurrency: Some(1),
        prefetch: None,
        batch: false,
    };
    let period = session.hello(&hello, stats).await?;
    stats.welcomed.fetch_add(1, Ordering::Relaxed);
    let mut req = 1;
    // The sessions' heartbeats spread over the period, then every 0.8 of it.
    let spread = period.mul_f64((index % 1_000) as f64 / 1_000.0);
    let mut beat = tokio::time::Instant::now() + spread;
    loop {
        while let Some(frame) = session.try_recv()? {
            match decode_reply(&frame, MAX_FRAME) {
                Ok(Reply::Order { job }) => {
                    let now = target.now_us();
                    let sent = job.args.get("t_us").and_then(|t| t.as_u64()).unwrap_or(0);
                    let n = job.args.get("n").and_then(|n| n.as_u64()).unwrap_or(0);
                    stats.note(&stats.latencies, &stats.ordered_at, n, sent, now);
                    stats.orders.fetch_add(1, Ordering::Relaxed);
                    req += 1;
                    session.send(&Request::Completed {
                        req,
                        outcome: Completed {
                            id: job.id,
                            attempt: job.attempt,
                            duration_ms: 0,
                        },
                    })?;
                }
                Ok(Reply::Ack { .. }) => {
                    stats.acked.fetch_add(1, Ordering::Relaxed);
                }
                // A welcome here answers a hello said again after a slow first one.
                Ok(Reply::HeartbeatAck { .. } | Reply::Welcome { .. }) => {}
                Ok(Reply::Error {
                    code: hopper_protocol::ErrorCode::Unauthorized,
                    ..
                }) => {
                    // The server ended the session (nothing heard for three periods): say
                    // hello again, as the protocol asks. Counted: it should not happen.
                    stats.session_lost.fetch_add(1, Ordering::Relaxed);
                    req += 1;
                    session.send(&with_req(&hello, req))?;
                }
                other => stats.error(format!("scale-{index}: {other:?}")),
            }
        }
        tokio::select! {
            r = session.readable() => r?,
            () = sleep_until(beat) => {
                req += 1;
                session.send(&Request::Heartbeat { req, leases: Vec::new() })?;
                beat += period.mul_f64(0.8);
            }
        }
    }
}

fn with_req(hello: &Request, new: u64) -> Request {
    let mut hello = hello.clone();
    if let Request::Hello { req, .. } = &mut hello {
        *req = new;
    }
    hello
}

/// The submitter: RATE jobs a second for SECONDS, on a schedule, one `submit` each.
async fn submitter(
    target: Arc<Target>,
    ctx: zmq::Context,
    jobs: u64,
    rate: f64,
) -> anyhow::Result<f64> {
    let session = Session::connect(&ctx, &target)?;
    let hello = Request::Hello {
        req: 0,
        version: hopper_protocol::VERSION,
        role: Role::Client,
        token: Some(target.token.clone()),
        name: Some("scale-submitter".to_owned()),
        kinds: None,
        queues: None,
        concurrency: None,
        prefetch: None,
        batch: false,
    };
    session.hello(&hello, &target.stats).await?;
    let stats = &target.stats;
    // The send time of each submit, by req (= job number + 1).
    let mut sent_us = vec![0u64; jobs as usize + 1];
    let began = tokio::time::Instant::now();
    let mut next = 0u64;
    let mut answered = 0u64;
    while answered < jobs {
        while let Some(frame) = session.try_recv()? {
            answered += 1;
            match decode_reply(&frame, MAX_FRAME) {
                Ok(Reply::Submitted { req, .. }) => {
                    stats.submitted.fetch_add(1, Ordering::Relaxed);
                    let now = target.now_us();
                    let sent = sent_us.get(req as usize).copied().unwrap_or(0);
                    stats.note(&stats.submit_rtts, &stats.replied_at, req, sent, now);
                }
                other => stats.error(format!("submitter: {other:?}")),
            }
        }
        let due = began + Duration::from_secs_f64(next as f64 / rate);
        tokio::select! {
            r = session.readable() => r?,
            () = sleep_until(due), if next < jobs && next - answered < MAX_IN_FLIGHT => {
                let t_us = target.now_us();
                next += 1;
                sent_us[next as usize] = t_us;
                let job = JobSpec::new(KIND, serde_json::json!({ "t_us": t_us, "n": next }));
                session.send(&Request::Submit { req: next, job })?;
            }
        }
    }
    Ok(began.elapsed().as_secs_f64())
}

/// `/proc/PID/status` field in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// User + system CPU seconds of a process (`self` for this one).
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: f64 = fields
        .get(11..13)
        .map(|f| f.iter().filter_map(|v| v.parse::<f64>().ok()).sum())
        .unwrap_or(0.0);
    ticks / 100.0 // USER_HZ, 100 on Linux
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn percentile_ms(sorted: &[u64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1));
    sorted.get(i).map_or(f64::NAN, |&us| us as f64 / 1_000.0)
}

/// The `hopper serve` under test (stopped with SIGTERM by [`Server::stop`]).
struct Server {
    child: Child,
    schema: String,
    log: PathBuf,
}

impl Server {
    fn start(
        bin: &str,
        database_url: &str,
        dir: &std::path::Path,
    ) -> anyhow::Result<(Server, String)> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let endpoint = format!("tcp://127.0.0.1:{port}");
        let sep = if database_url.contains('?') { '&' } else { '?' };
        let schema = format!("scale_{}", &uuid::Uuid::now_v7().simple().to_string()[24..]);
        let log = dir.join("serve.log");
        let child = Command::new(bin)
            .args([
                "--schema", &schema, "serve", "--listen", &endpoint, "--curve",
            ])
            .arg("--token-file")
            .arg(dir.join("serve.token"))
            .args(["--pool-size", "8"])
            .env(
                "DATABASE_URL",
                format!("{database_url}{sep}application_name={APP}"),
            )
            .env(
                "HOPPER_LOG",
                std::env::var("HOPPER_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .env("NO_COLOR", "1")
            .stdout(Stdio::from(std::fs::File::create(&log)?))
            .stderr(Stdio::from(
                std::fs::File::options().append(true).open(&log)?,
            ))
            .spawn()
            .with_context(|| format!("starting {bin}"))?;
        Ok((Server { child, schema, log }, endpoint))
    }

    /// Waits for the line that gives the server's public key.
    async fn key(&mut self) -> anyhow::Result<String> {
        let marker = "peers need the server key ";
        for _ in 0..600 {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            if let Some(rest) = text.split(marker).nth(1) {
                return rest
                    .split_whitespace()
                    .next()
                    .map(str::to_owned)
                    .ok_or_else(|| anyhow!("no key after {marker:?}"));
            }
            if self.child.try_wait()?.is_some() {
                bail!("the server stopped: {text}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("the server gave no key in 60 s")
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

fn main() -> anyhow::Result<()> {
    let options = Options::parse()?;
    // N sessions take about 2N descriptors here (socket and mailbox) and N in the server,
    // which inherits the raised limit.
    rlimit::increase_nofile_limit(u64::MAX)?;
    // One thread: the sessions' tasks are local to it (a socket may not be shared).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    tokio::task::LocalSet::new().block_on(&runtime, run(options))
}

async fn run(options: Options) -> anyhow::Result<()> {
    let bin = std::env::var("HOPPER_BIN").context("HOPPER_BIN: the hopper binary to serve")?;
    let database_url = std::env::var("DATABASE_URL").context("DATABASE_URL")?;
    let (db, connection) = tokio_postgres::connect(&database_url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let dir = std::env::temp_dir().join(format!("hopper-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (mut server, endpoint) = Server::start(&bin, &database_url, &dir)?;
    let outcome = measure(&options, &db, &mut server, endpoint, &dir).await;
    let schema = server.schema.clone();
    let log = server.log.clone();
    server.stop();
    db.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await?;
    // Read and removed before anything is printed: a reader that stops early (`| head -1`)
    // must not leave the directory behind.
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    let figures = outcome?;
    if options.json {
        println!("{figures}");
    } else if let Some(map) = figures.as_object() {
        for (k, v) in map {
            println!("{k}: {v}");
        }
    }
    println!("server log: {} bytes", text.len());
    for line in text
        .lines()
        .rev()
        .take(8)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        println!("  | {}", line.chars().take(200).collect::<String>());
    }
    Ok(())
}

async fn measure(
    options: &Options,
    db: &tokio_postgres::Client,
    server: &mut Server,
    endpoint: String,
    dir: &std::path::Path,
) -> anyhow::Result<serde_json::Value> {
    let server_key = server.key().await?;
    let token = std::fs::read_to_string(dir.join("serve.token"))?
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("no token in the token file"))?;
    let pid = server.child.id();
    let rss_idle = status_kib(pid, "VmRSS:");
    let target = Arc::new(Target {
        endpoint,
        server_key,
        token,
        origin: Instant::now(),
        stats: Stats::default(),
    });
    let stats = &target.stats;

    // Connect the workers, a steady stream of handshakes.
    let n = options.workers;
    let contexts: Vec<zmq::Context> = (0..n.div_ceil(PER_CONTEXT) + 1)
        .map(|_| zmq::Context::new())
        .collect();
    let started = tokio::time::Instant::now();
    let mut sessions = Vec::with_capacity(n);
    for i in 0..n {
        if i % 50 == 0 {
            sleep_until(started + Duration::from_secs_f64(i as f64 / options.connect_rate)).await;
        }
        let t = target.clone();
        let ctx = contexts[i / PER_CONTEXT].clone();
        sessions.push(tokio::task::spawn_local(async move {
            if let Err(e) = worker(t.clone(), ctx, i).await {
                t.stats.error(format!("scale-{i}: {e:#}"));
            }
        }));
    }
    let deadline = started + Duration::from_secs(300);
    while stats.welcomed.load(Ordering::Relaxed) < n as u64 {
        if tokio::time::Instant::now() > deadline || stats.errors.load(Ordering::Relaxed) > 0 {
            bail!(
                "{} of {n} sessions welcomed; first error: {:?}",
                stats.welcomed.load(Ordering::Relaxed),
                stats.first_error.lock().ok().and_then(|e| e.clone())
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let connect_s = started.elapsed().as_secs_f64();
    let rss_connected = status_kib(pid, "VmRSS:");

    // Sample the server's connections and RSS while the jobs run.
    let count_sql =
        format!("SELECT count(*) FROM pg_stat_activity WHERE application_name = '{APP}'");
    let samples = Arc::new(Mutex::new((Vec::<i64>::new(), rss_connected)));
    let sampler = {
        let samples = samples.clone();
        let db_url = std::env::var("DATABASE_URL")?;
        tokio::spawn(async move {
            let Ok((c, conn)) = tokio_postgres::connect(&db_url, tokio_postgres::NoTls).await
            else {
                return;
            };
            tokio::spawn(conn);
            loop {
                let count = c
                    .query_one(&count_sql, &[])
                    .await
                    .map(|r| r.get::<_, i64>(0));
                if let (Ok(count), Ok(mut s)) = (count, samples.lock()) {
                    s.0.push(count);
                    s.1 = s.1.max(status_kib(pid, "VmRSS:"));
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };

    let load_before = load_average();
    let (server_cpu0, own_cpu0) = (cpu_seconds(&pid.to_string()), cpu_seconds("self"));
    let jobs = (options.rate * options.seconds) as u64;
    for by_job in [&stats.replied_at, &stats.ordered_at] {
        *by_job.lock().map_err(|_| anyhow!("poisoned"))? = vec![0; jobs as usize + 1];
    }
    let submit_s = submitter(
        target.clone(),
        contexts[contexts.len() - 1].clone(),
        jobs,
        options.rate,
    )
    .await?;
    let completed_sql = format!(
        "SELECT count(*) FROM {}.jobs WHERE state = 'completed'",
        server.schema
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut completed = 0;
    while tokio::time::Instant::now() < deadline {
        completed = db.query_one(&completed_sql, &[]).await?.get::<_, i64>(0);
        if completed >= jobs as i64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let load_after = load_average();
    let server_cpu = cpu_seconds(&pid.to_string()) - server_cpu0;
    let own_cpu = cpu_seconds("self") - own_cpu0;
    sampler.abort();
    for s in &sessions {
        s.abort();
    }
    for s in sessions {
        let _ = s.await;
    }

    let mut latencies =
        std::mem::take(&mut *stats.latencies.lock().map_err(|_| anyhow!("poisoned"))?);
    latencies.sort_unstable();
    let mut rtts = std::mem::take(&mut *stats.submit_rtts.lock().map_err(|_| anyhow!("poisoned"))?);
    rtts.sort_unstable();
    // Order minus reply, by job (negative: the order came first).
    let replied = std::mem::take(&mut *stats.replied_at.lock().map_err(|_| anyhow!("poisoned"))?);
    let ordered = std::mem::take(&mut *stats.ordered_at.lock().map_err(|_| anyhow!("poisoned"))?);
    let mut after_reply: Vec<i64> = replied
        .iter()
        .zip(&ordered)
        .filter(|(r, o)| **r > 0 && **o > 0)
        .map(|(&r, &o)| o as i64 - r as i64)
        .collect();
    after_reply.sort_unstable();
    let signed_ms = |p: f64| {
        let i = ((after_reply.len() as f64 * p) as usize).min(after_reply.len().saturating_sub(1));
        after_reply
            .get(i)
            .map_or(f64::NAN, |&us| (us as f64 / 10.0).round() / 100.0)
    };
    let (conns, rss_peak) = samples.lock().map_err(|_| anyhow!("poisoned"))?.clone();
    let mib = |kib: u64| (kib as f64 / 102.4).round() / 10.0;
    let round = |x: f64| (x * 100.0).round() / 100.0;
    Ok(serde_json::json!({
        "generator": "rust",
        "workers": n,
        "rate": options.rate,
        "jobs": jobs,
        "submitted": stats.submitted.load(Ordering::Relaxed),
        "orders": stats.orders.load(Ordering::Relaxed),
        "acked": stats.acked.load(Ordering::Relaxed),
        "completed": completed,
        "connect_s": round(connect_s),
        "submit_s": round(submit_s),
        "rate_reached": round(jobs as f64 / submit_s),
        "db_connections_max": conns.iter().max(),
        "db_connections_samples": conns.len(),
        "rss_idle_mib": mib(rss_idle),
        "rss_connected_mib": mib(rss_connected),
        "rss_peak_mib": mib(rss_peak),
        "rss_hwm_mib": mib(status_kib(pid, "VmHWM:")),
        "server_cpu_s": round(server_cpu),
        "generator_cpu_s": round(own_cpu),
        "generator_rss_mib": mib(status_kib(std::process::id(), "VmRSS:")),
        "hello_again": stats.hello_again.load(Ordering::Relaxed),
        "session_lost": stats.session_lost.load(Ordering::Relaxed),
        "errors": stats.errors.load(Ordering::Relaxed),
        "first_error": stats.first_error.lock().ok().and_then(|e| e.clone()),
        "latencies": latencies.len(),
        "p50_ms": round(percentile_ms(&latencies, 0.5)),
        "p99_ms": round(percentile_ms(&latencies, 0.99)),
        "max_ms": round(latencies.last().map_or(f64::NAN, |&us| us as f64 / 1_000.0)),
        "submit_rtt_p50_ms": round(percentile_ms(&rtts, 0.5)),
        "submit_rtt_p99_ms": round(percentile_ms(&rtts, 0.99)),
        "order_after_reply_p50_ms": signed_ms(0.5),
        "order_after_reply_p99_ms": signed_ms(0.99),
        "load_before": load_before,
        "load_after": load_after,
    }))
}
