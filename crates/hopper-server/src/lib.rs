//! `hopper serve`: the network server of hopper.
//!
//! Three roles: clients submit jobs, this server runs the queue loop against the database,
//! workers process jobs. Clients and workers connect with ZeroMQ DEALER sockets to the
//! server's ROUTER and speak the CBOR protocol of [`hopper_protocol`] (described for
//! implementers in `docs/protocol.md`). Workers need no database credentials: the server
//! holds a small pool of connections and the one LISTEN, claims jobs only for queues some
//! connected worker serves, and pushes each job as an `order` to a worker that declared its
//! kind, never more than the worker's declared concurrency.
//!
//! The server keeps no state that matters outside the database. Leases live in the jobs
//! table under the server's node id, which is stable across restarts
//! ([`stable_node_id`]): a server that comes back within the node timeout keeps its
//! in-flight jobs, and reconnecting workers report them as usual. A worker silent for three
//! heartbeat periods is dropped and its jobs are failed and retried at once.
//!
//! ```no_run
//! # async fn run(backend: std::sync::Arc<dyn hopper_core::Backend>) -> Result<(), hopper_server::ServeError> {
//! use hopper_server::{Auth, ServeConfig, Server};
//!
//! let config = ServeConfig::new(backend, "tcp://127.0.0.1:7010", Auth::Tokens(vec!["s3cret".into()]));
//! let server = Server::start(config).await?;
//! println!("listening on {}", server.endpoint());
//! server.run_until_signal().await;
//! # Ok(()) }
//! ```

mod admin;
mod auth;
mod convert;
mod dispatch;
mod exposure;
mod in_flight;
mod keys;
mod liveness;
mod log_writer;
mod outcome_writer;
mod recording;
mod roster;
mod server;
mod settings;
mod tasks;
mod transport;

use std::sync::Arc;
use std::time::Duration;

use hopper::maintenance::Housekeeping;
use hopper::readings::Readings;
use hopper_core::{Backend, NodeId};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use auth::{
    Access, Auth, Credential, MIN_TOKEN_LEN, TokenLine, constant_time_eq, default_token_path,
    generate_token, invalid_line, read_credentials, read_token_lines, read_tokens, write_new_token,
};
pub use exposure::is_loopback;
pub use keys::{ServerKeys, check_key, default_key_path, key_path_beside};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The endpoint could not be bound (in use, bad address, unsupported transport), or
    /// would expose plaintext beyond this host without `insecure_plaintext`.
    #[error("cannot listen on {endpoint}: {reason}")]
    Bind {
        /// The endpoint.
        endpoint: String,
        /// Why.
        reason: String,
    },
    /// The database refused the server's registration.
    #[error(transparent)]
    Backend(#[from] hopper_core::Error),
    /// A setting the server cannot run with ([`ServeConfig::check`]).
    #[error("invalid server setting: {0}")]
    Invalid(String),
}

/// How the server runs. [`ServeConfig::new`] gives the documented defaults; set the fields
/// to change them. `#[non_exhaustive]`, so a new setting is not a breaking change. A setting
/// the server cannot run with is refused when it starts ([`ServeConfig::check`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeConfig {
    /// The storage backend (a PostgreSQL pool of a few connections).
    pub backend: Arc<dyn Backend>,
    /// The backend of the requests that change or list jobs and queues for an operator
    /// (`cancel`, `retry`, `delete`, `retry_failed`, `clear`, `update_queue`, `list_jobs`,
    /// `queue_stats`, `list_queues`, `list_cron`, `list_nodes`, `job_stats`): on PostgreSQL,
    /// a pool of its own whose statements wait a bounded time for a lock
    /// ([`hopper::PgOptions::lock_timeout`];
    /// `hopper serve` gives it the pool of `--admin-pool-size` and `--admin-lock-timeout`,
    /// which its HTTP API uses too). A cancel of a job whose row another transaction holds
    /// is then answered with a transient error after the bound, instead of waiting as long
    /// as the holder with one of `backend`'s connections. Default: none, they run on `backend`.
    pub admin: Option<Arc<dyn Backend>>,
    /// The connections in `backend`'s pool (what `hopper serve --pool-size` sets): the
    /// requests of one peer execute on at most a quarter of them at once, at least one (and
    /// those of all peers on all but a quarter, kept for the claims and outcome batches), so
    /// that a peer whose requests wait on a lock leaves the rest to the other peers and to
    /// the claims and outcome batches (`docs/protocol.md`, §8). Default: 8, as
    /// `--pool-size`.
    pub pool_size: usize,
    /// The ZeroMQ endpoint to bind, e.g. `tcp://127.0.0.1:7010` (port 0 picks a free one).
    pub listen: String,
    /// Who may connect.
    pub auth: Auth,
    /// The CURVE key pair: with one, every connection is encrypted and peers must know the
    /// public key. Default: none (plaintext), which only a loopback or local endpoint
    /// accepts unless [`ServeConfig::insecure_plaintext`].
    pub curve: Option<ServerKeys>,
    /// Accept plaintext on an endpoint other peers can reach (`--insecure-plaintext`).
    /// Default: false.
    pub insecure_plaintext: bool,
    /// A connection that has not completed its ZeroMQ handshake (CURVE included) this long
    /// after it was accepted is closed. Default: 5 s.
    pub handshake_timeout: Duration,
    /// Connections held at once; past it, new peers' handshakes are refused (logged once).
    /// Default: 10,000.
    pub max_connections: usize,
    /// The node id under which jobs are leased. Default: [`stable_node_id`] of the listen
    /// endpoint and this host, so a restarted server keeps its in-flight jobs.
    pub node_id: NodeId,
    /// A human name for the node row. Default: `hopper serve <listen>`.
    pub node_name: String,
    /// How often peers must send something; a worker silent for three periods is dropped.
    /// Default: 5 s.
    pub heartbeat: Duration,
    /// The lease granted per order and renewed by each worker heartbeat. Default: 30 s.
    pub lease: Duration,
    /// The largest frame accepted. Default: [`hopper_protocol::MAX_FRAME`] (2 MiB).
    pub max_frame: usize,
    /// Most jobs claimed in one statement. Default: 1,000, what a runtime claims at once
    /// (W7 drains about a fifth faster than with 500; docs/benchmarks.md).
    pub claim_batch: usize,
    /// Longest wait between claims of a queue without a notification. Default: 1 s.
    pub poll_interval: Duration,
    /// A node (another server or a direct worker process) silent this long is dead and its
    /// jobs are released. Default: 30 s.
    pub node_dead_after: Duration,
    /// How long a claimed job that no connected worker can take (its kind is served by
    /// none) is put back for, without using an attempt. Default: 1 s.
    pub unplaceable_delay: Duration,
    /// Retention and vacuuming of the job table, as a worker runtime does them (remote
    /// workers have no database connection to do it with). Default:
    /// [`Housekeeping::default`] (completed jobs kept 24 h, failed 7 days, a vacuum check
    /// every 10 s).
    pub housekeeping: Housekeeping,
    /// A client over `backend` that submissions are enqueued through, with its enqueue
    /// middleware, its `hopper.enqueue` span and the enqueued counter (`hopper serve`
    /// built with `otel` sets one with the OpenTelemetry middleware when traces are
    /// exported: the span is a child of the submission's `meta.traceparent`). Default:
    /// none, submissions are written straight to `backend`.
    pub client: Option<hopper::Client>,
    /// The whole-table readings of the `queue_stats` and `job_stats` requests (the counts
    /// by queue and state, what finished per minute): each reads the jobs table whole, so
    /// requests that arrive while one is taken share it, and one that took 50 ms or more
    /// is served again for ten times as long (a minute at most), whoever asks. Give the
    /// HTTP side the same ([`hopper::readings`]; `hopper serve` does) and the two share
    /// one reading. Default: [`Readings::default`], its own, under
    /// [`hopper::readings::StatsReuse::default`].
    pub readings: Readings,
}

impl ServeConfig {
    /// A configuration with every default, listening on `listen`.
    pub fn new(backend: Arc<dyn Backend>, listen: impl Into<String>, auth: Auth) -> Self {
        let listen = listen.into();
        ServeConfig {
            backend,
            admin: None,
            pool_size: 8,
            node_id: stable_node_id(&[&hopper::maintenance::host_name(), &listen]),
            node_name: format!("hopper serve {listen}"),
            listen,
            auth,
            curve: None,
            insecure_plaintext: false,
            handshake_timeout: Duration::from_secs(5),
            max_connections: 10_000,
            heartbeat: Duration::from_millis(hopper_protocol::DEFAULT_HEARTBEAT_MS),
            lease: Duration::from_secs(30),
            max_frame: hopper_protocol::MAX_FRAME,
            claim_batch: 1000,
            poll_interval: Duration::from_secs(1),
            node_dead_after: Duration::from_secs(30),
            unplaceable_delay: Duration::from_secs(1),
            housekeeping: Housekeeping::default(),
            client: None,
            readings: Readings::default(),
        }
    }
}

/// A node id that is the same every time for the same `parts` (a UUIDv5), e.g. the host,
/// the schema and the listen endpoint: a server restarted with the same settings takes up
/// the same node, so its in-flight jobs are not released as a dead node's.
pub fn stable_node_id(parts: &[&str]) -> NodeId {
    Uuid::new_v5(
        &Uuid::NAMESPACE_OID,
        format!("hopper-serve\0{}", parts.join("\0")).as_bytes(),
    )
}

/// The server: [`Server::start`] binds and returns a [`ServerHandle`].
#[derive(Debug)]
pub struct Server;

impl Server {
    /// Checks the settings ([`ServeConfig::check`]), registers the node, binds the endpoint
    /// and starts serving in the background.
    pub async fn start(config: ServeConfig) -> Result<ServerHandle, ServeError> {
        config.check()?;
        server::start(config).await
    }
}

/// A running server.
#[derive(Debug)]
pub struct ServerHandle {
    endpoint: String,
    node_id: NodeId,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    services: hopper::maintenance::Services,
    health: hopper::Health,
    /// The node's liveness lock, where the backend offers one.
    hold: Option<liveness::Hold>,
}

impl ServerHandle {
    /// The bound endpoint, with the port resolved (`tcp://127.0.0.1:41234`).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The node id the server's leases are held under.
    pub fn node_id(&self) -> NodeId {
        self.node_id
    }

    /// Stops serving. Workers' leases stay in the database under this node id: a server
    /// started again with the same node id within the node timeout carries on with them
    /// (the node lets go of its liveness lock's registration before it gives the lock
    /// back, so other nodes do not take it for vanished).
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        for task in std::mem::take(&mut self.tasks) {
            let _ = task.await;
        }
        self.services.stop().await;
        if let Some(hold) = self.hold.take() {
            hold.release().await;
        }
        tracing::info!(endpoint = %self.endpoint, "server stopped");
    }

    /// Stops at once, as a crash would (for fault tests): nothing is flushed, and the
    /// liveness lock is given back as a dead process's is, so other nodes release the
    /// server's jobs.
    pub fn abort(self) {
        self.stop.cancel();
        for task in &self.tasks {
            task.abort();
        }
        self.services.abort();
        if let Some(hold) = &self.hold {
            hold.abort();
        }
    }

    /// Whether every maintenance task still runs (see [`hopper::supervise`]).
    pub fn health(&self) -> hopper::Health {
        self.health.clone()
    }

    /// Serves until SIGINT or SIGTERM, or until a maintenance task gives up (the server is
    /// then unhealthy: see [`ServerHandle::health`]), then stops.
    pub async fn run_until_signal(self) {
        tokio::select! {
            _ = hopper::shutdown_signal() => tracing::info!("signal received; stopping the server"),
            failure = self.health.failed() => {
                tracing::error!(%failure, "the server is unhealthy; stopping");
            }
        }
        self.shutdown().await;
    }
}

/// Dropping the handle stops the server too (without waiting), so that its socket thread
/// does not outlive it.
impl Drop for ServerHandle {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Binds and serves until SIGINT or SIGTERM.
pub async fn serve(config: ServeConfig) -> Result<(), ServeError> {
    Server::start(config).await?.run_until_signal().await;
    Ok(())
}
