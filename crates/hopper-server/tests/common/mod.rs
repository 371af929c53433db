//! Shared helpers of the server tests: a server in this process on a test schema, and a
//! raw protocol peer for poking at the wire.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use ciborium::Value;
use hopper::backend::{Backend, ClaimParams};
use hopper::testing::TestDatabase;
use hopper::{JobId, NewJob, PgBackend, PgOptions};
use hopper_server::{Auth, ServeConfig, Server, ServerHandle};

/// The token the tests' servers accept.
pub const TOKEN: &str = "test-token-0123456789";

/// A backend on `db`'s schema whose connections carry `application_name`, so a test can
/// count them in `pg_stat_activity`.
pub async fn server_backend(db: &TestDatabase, app: &str, pool: usize) -> Arc<dyn Backend> {
    let sep = if db.url().contains('?') { '&' } else { '?' };
    let url = format!("{}{sep}application_name={app}", db.url());
    let backend = PgBackend::connect(
        &url,
        PgOptions::default()
            .with_schema(db.schema())
            .with_pool_size(pool),
    )
    .await
    .expect("connects");
    Arc::new(backend)
}

/// The `application_name` of the connections of a server of [`config`].
pub fn server_app(db: &TestDatabase) -> String {
    format!("srv_{}", db.schema())
}

/// A server config for `db` on a free loopback port, heartbeats every `heartbeat` (the
/// lease and the node timeout at least twice that).
pub async fn config(db: &TestDatabase, heartbeat: Duration) -> ServeConfig {
    let backend = server_backend(db, &server_app(db), 8).await;
    let mut config = ServeConfig::new(
        backend,
        "tcp://127.0.0.1:0",
        Auth::Tokens(vec![TOKEN.to_owned()]),
    );
    config.node_id = uuid::Uuid::now_v7();
    config.heartbeat = heartbeat;
    // What `ServeConfig::check` asks of a long heartbeat (tests use them to keep quiet).
    config.lease = config.lease.max(heartbeat * 2);
    config.node_dead_after = config.node_dead_after.max(heartbeat * 2);
    config
}

/// Starts a server.
pub async fn start(config: ServeConfig) -> ServerHandle {
    Server::start(config).await.expect("server starts")
}

/// The URL a remote client or worker uses for `server`.
pub fn url(endpoint: &str) -> String {
    format!("{endpoint}?token={TOKEN}")
}

/// A map from string keys.
pub fn map(entries: Vec<(&str, Value)>) -> Value {
    Value::Map(
        entries
            .into_iter()
            .map(|(k, v)| (Value::Text(k.to_owned()), v))
            .collect(),
    )
}

/// Text.
pub fn text(s: &str) -> Value {
    Value::Text(s.to_owned())
}

/// An integer.
pub fn int(n: i64) -> Value {
    Value::Integer(n.into())
}

/// A raw DEALER peer (libzmq) that sends and receives CBOR maps.
pub struct RawPeer {
    /// In a blocking task while it waits for a message.
    socket: Option<zmq::Socket>,
}

/// The context of the tests' raw peers.
fn context() -> &'static zmq::Context {
    static CONTEXT: std::sync::OnceLock<zmq::Context> = std::sync::OnceLock::new();
    CONTEXT.get_or_init(zmq::Context::new)
}

impl RawPeer {
    /// Connects to `endpoint` in plaintext.
    pub async fn connect(endpoint: &str) -> Self {
        Self::connect_with(endpoint, None).await
    }

    /// Connects to `endpoint`, with CURVE when given the server's public key (and a key
    /// pair of its own).
    pub async fn connect_with(endpoint: &str, server_key: Option<&str>) -> Self {
        let socket = context().socket(zmq::DEALER).expect("a socket");
        socket.set_linger(0).expect("linger");
        socket.set_rcvtimeo(10_000).expect("a receive timeout");
        // A send waits only while no connection is up (the server refused or dropped it,
        // and the socket is reconnecting): never for ever.
        socket.set_sndtimeo(10_000).expect("a send timeout");
        if let Some(key) = server_key {
            let mine = zmq::CurveKeyPair::new().expect("a key pair");
            socket
                .set_curve_serverkey(key.as_bytes())
                .expect("server key");
            socket
                .set_curve_publickey(&mine.public_key)
                .expect("public key");
            socket
                .set_curve_secretkey(&mine.secret_key)
                .expect("secret key");
        }
        socket.connect(endpoint).expect("connects");
        RawPeer {
            socket: Some(socket),
        }
    }

    /// Sends raw bytes as one frame (queued until the connection is up; failing if no
    /// connection is up within the timeout, [`RawPeer::set_timeout`]).
    pub async fn send_bytes(&mut self, bytes: Vec<u8>) {
        assert!(
            self.try_send_bytes(bytes),
            "no connection to the server to send on"
        );
    }

    /// Sends raw bytes as one frame; false when no connection came up to send on within
    /// the timeout (the server refused it).
    pub fn try_send_bytes(&mut self, bytes: Vec<u8>) -> bool {
        match self.socket.as_ref().expect("the socket").send(bytes, 0) {
            Ok(()) => true,
            Err(zmq::Error::EAGAIN) => false,
            Err(e) => panic!("sending: {e}"),
        }
    }

    /// Sends a CBOR value.
    pub async fn send(&mut self, value: &Value) {
        let mut bytes = Vec::new();
        ciborium::into_writer(value, &mut bytes).expect("encodes");
        self.send_bytes(bytes).await;
    }

    /// How long [`RawPeer::try_recv_bytes`] waits, and a send for a connection (10 s unless
    /// set).
    pub fn set_timeout(&mut self, timeout: Duration) {
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        let socket = self.socket.as_ref().expect("the socket");
        socket.set_rcvtimeo(ms).expect("a receive timeout");
        socket.set_sndtimeo(ms).expect("a send timeout");
    }

    /// Receives one frame, or `None` after the timeout.
    pub async fn try_recv_bytes(&mut self) -> Option<Vec<u8>> {
        let socket = self.socket.take().expect("the socket");
        let (socket, frames) = tokio::task::spawn_blocking(move || {
            let frames = socket.recv_multipart(0);
            (socket, frames)
        })
        .await
        .expect("the receiving task");
        self.socket = Some(socket);
        frames.ok().and_then(|mut f| f.pop())
    }

    /// A frame already received, without waiting.
    pub fn try_recv_now(&mut self) -> Option<Vec<u8>> {
        let socket = self.socket.as_ref().expect("the socket");
        socket
            .recv_multipart(zmq::DONTWAIT)
            .ok()
            .and_then(|mut f| f.pop())
    }

    /// Receives one map, failing after 10 s.
    pub async fn recv(&mut self) -> Value {
        let frame = self.try_recv_bytes().await.expect("a reply within 10 s");
        ciborium::from_reader(&frame[..]).expect("CBOR")
    }

    /// Receives until a reply with `type` arrives (skipping pushes of other types).
    pub async fn recv_type(&mut self, ty: &str) -> Value {
        loop {
            let v = self.recv().await;
            if field(&v, "type").and_then(Value::as_text) == Some(ty) {
                return v;
            }
        }
    }

    /// Closes the socket as a process that exits after sending does: what was sent is still
    /// written (for at most `within`), then the connection closes.
    pub fn close_after_sending(mut self, within: Duration) {
        let socket = self.socket.take().expect("the socket");
        let ms = i32::try_from(within.as_millis()).unwrap_or(i32::MAX);
        socket.set_linger(ms).expect("linger");
    }

    /// Says hello; returns the reply.
    pub async fn hello(&mut self, role: &str, token: &str, extra: Vec<(&str, Value)>) -> Value {
        let mut entries = vec![
            ("type", text("hello")),
            ("req", int(1)),
            ("version", int(1)),
            ("role", text(role)),
            ("token", text(token)),
        ];
        entries.extend(extra);
        self.send(&map(entries)).await;
        self.recv().await
    }
}

/// A field of a map.
pub fn field<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    v.as_map()?
        .iter()
        .find(|(k, _)| k.as_text() == Some(name))
        .map(|(_, v)| v)
}

/// A text field of a map ("" if absent).
pub fn text_of<'a>(v: &'a Value, name: &str) -> &'a str {
    field(v, name).and_then(Value::as_text).unwrap_or("")
}

/// Waits for a worker's next `order` (10 s at most): its job id and attempt. Meanwhile it
/// heartbeats every 100 ms, listing no leases, as a worker keeps its session: on a loaded
/// machine the job can take longer to come than the short heartbeat periods tests use, and
/// a silent peer is dropped after three. (A lease not listed is lost only when its order is
/// older than 5 s.)
pub async fn order(peer: &mut RawPeer) -> (String, i64) {
    let beat = map(vec![("type", text("heartbeat")), ("req", int(0))]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    peer.set_timeout(Duration::from_millis(100));
    let order = loop {
        match peer.try_recv_bytes().await {
            Some(frame) => {
                let v: Value = ciborium::from_reader(&frame[..]).expect("CBOR");
                if field(&v, "type").and_then(Value::as_text) == Some("order") {
                    break v;
                }
            }
            None => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "an order within 10 s"
                );
                peer.send(&beat).await;
            }
        }
    };
    peer.set_timeout(Duration::from_secs(10));
    let job = field(&order, "job").cloned().unwrap_or(Value::Null);
    let attempt = field(&job, "attempt")
        .and_then(Value::as_integer)
        .and_then(|i| i64::try_from(i).ok())
        .unwrap_or(-1);
    (text_of(&job, "id").to_owned(), attempt)
}

/// A SQL connection to the test's database.
pub async fn sql(db: &TestDatabase) -> anyhow::Result<tokio_postgres::Client> {
    let (client, conn) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls).await?;
    tokio::spawn(conn);
    Ok(client)
}

/// Jobs in their first attempt, leased by a node the server does not know: no peer of it
/// holds them, and none may report, extend or log for them.
pub async fn attempts(db: &TestDatabase, n: usize) -> anyhow::Result<Vec<JobId>> {
    leased_by(db, uuid::Uuid::now_v7(), n).await
}

/// Jobs in their first attempt, leased by `node`: given a server's node id, jobs an earlier
/// run of that server sent to its workers, which no peer of this run holds.
pub async fn leased_by(
    db: &TestDatabase,
    node: uuid::Uuid,
    n: usize,
) -> anyhow::Result<Vec<JobId>> {
    let backend = db.backend();
    let jobs: Vec<NewJob> = (0..n)
        .map(|_| NewJob::new("logged", serde_json::json!({})).with_queue("logged"))
        .collect();
    backend.job_insert_many(&jobs).await?;
    let mut claimed = 0;
    while claimed < n {
        let limit = u32::try_from((n - claimed).min(500))?;
        let got = backend
            .job_claim(&ClaimParams {
                queue: "logged".into(),
                node,
                limit,
                lease: Duration::from_secs(600),
                kinds: None,
            })
            .await?;
        assert!(!got.is_empty(), "every job claimed");
        claimed += got.len();
    }
    Ok(jobs.iter().map(|j| j.id).collect())
}

/// Has `peer` list attempt 1 of `jobs` in a heartbeat: jobs an earlier run of the server
/// leased ([`leased_by`] its node), which the server then adopts as the peer's orders, as
/// it does a reconnected worker's after a restart.
pub async fn adopt(peer: &mut RawPeer, jobs: &[JobId]) {
    peer.send(&heartbeat_of(1, jobs)).await;
    let reply = peer.recv_type("heartbeat_ack").await;
    assert_eq!(
        field(&reply, "lost"),
        Some(&Value::Array(Vec::new())),
        "{reply:?}"
    );
}

/// A `heartbeat` (numbered `req`) listing attempt 1 of `jobs`.
pub fn heartbeat_of(req: i64, jobs: &[JobId]) -> Value {
    let leases = jobs
        .iter()
        .map(|id| map(vec![("id", text(&id.to_string())), ("attempt", int(1))]))
        .collect();
    map(vec![
        ("type", text("heartbeat")),
        ("req", int(req)),
        ("leases", Value::Array(leases)),
    ])
}

/// A `completed` (numbered `req`) for attempt `attempt` of job `id`.
pub fn completed(req: i64, id: &str, attempt: i64) -> Value {
    map(vec![
        ("type", text("completed")),
        ("req", int(req)),
        ("id", text(id)),
        ("attempt", int(attempt)),
    ])
}

/// A `log` request of one info line, `message`, for attempt 1 of `id`.
pub fn log_request(req: usize, id: JobId, message: &str) -> Value {
    log_request_of(req, id, 1, message)
}

/// A `log` request of one info line, `message`, for attempt `attempt` of `id`.
pub fn log_request_of(req: usize, id: JobId, attempt: i64, message: &str) -> Value {
    let line = map(vec![("level", text("info")), ("message", text(message))]);
    map(vec![
        ("type", text("log")),
        ("req", int(i64::try_from(req).unwrap_or(i64::MAX))),
        ("id", text(&id.to_string())),
        ("attempt", int(attempt)),
        ("lines", Value::Array(vec![line])),
    ])
}

/// The messages of the lines stored for `id`, by attempt.
pub async fn stored_lines(db: &TestDatabase, id: JobId) -> anyhow::Result<Vec<(i32, Vec<String>)>> {
    let backend = db.backend();
    let logs = backend
        .logs()
        .ok_or_else(|| anyhow::anyhow!("PostgreSQL keeps logs"))?;
    Ok(logs
        .job_logs(id)
        .await?
        .into_iter()
        .map(|log| {
            let lines = log.lines.into_iter().map(|l| l.message).collect();
            (log.attempt, lines)
        })
        .collect())
}

/// A connection holding the schema's `table` locked in `mode` (`SHARE`: writes to it
/// wait; `ACCESS EXCLUSIVE`: reads too) until it runs `COMMIT`.
pub async fn lock_table(
    db: &TestDatabase,
    table: &str,
    mode: &str,
) -> anyhow::Result<tokio_postgres::Client> {
    let lock = sql(db).await?;
    let schema = db.schema();
    lock.batch_execute(&format!(
        "BEGIN; LOCK TABLE {schema}.{table} IN {mode} MODE"
    ))
    .await?;
    Ok(lock)
}

/// How many connections of `app` wait on a lock in a statement whose text is `LIKE`
/// `query` (`%`: any).
pub async fn lock_waits(db: &TestDatabase, app: &str, query: &str) -> anyhow::Result<i64> {
    let row = sql(db)
        .await?
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
             WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE $2",
            &[&app, &query],
        )
        .await?;
    Ok(row.get(0))
}

/// Waits (10 s at most) until `n` connections of `app` wait on a lock in a statement whose
/// text is `LIKE` `query`.
pub async fn until_lock_waits(
    db: &TestDatabase,
    app: &str,
    query: &str,
    n: i64,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while lock_waits(db, app, query).await? < n {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "fewer than {n} statements like {query:?} wait on the lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// Counts the connections of `app` in `pg_stat_activity`.
pub async fn connections(db: &TestDatabase, app: &str) -> i64 {
    let (client, conn) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls)
        .await
        .expect("connects");
    tokio::spawn(conn);
    let row = client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .await
        .expect("counts");
    row.get(0)
}

static LOGS: std::sync::Mutex<Vec<u8>> = std::sync::Mutex::new(Vec::new());

/// Appends what the subscriber writes to [`LOGS`].
struct Capture;

impl std::io::Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        LOGS.lock()
            .map_err(|_| std::io::Error::other("poisoned"))?
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Starts capturing the logs (once per test binary: every test of it logs into one capture)
/// and returns everything logged so far.
pub fn logs() -> String {
    static INIT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    INIT.get_or_init(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter("info,hopper=debug,hopper_server=debug")
            .with_ansi(false)
            .with_writer(|| Capture)
            .try_init();
    });
    let bytes = LOGS.lock().map(|l| l.clone()).unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The log lines that mention `needle`.
pub fn lines_with(needle: &str) -> Vec<String> {
    logs()
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_owned)
        .collect()
}
