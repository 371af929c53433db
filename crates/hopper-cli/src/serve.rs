//! `hopper serve`: runs the network server (`hopper-server`) against the database.
//!
//! Security is on by default: with no `--token-file` and no `--insecure-no-auth`, the
//! server reads its tokens (each with its role) from the default token file, and if there
//! is none it generates an admin token, writes it there readable by this user only (mode
//! 0600) and says where. A token file that others may read, or that holds a token shorter
//! than 16 characters, is refused. Off
//! loopback, traffic is encrypted with CURVE: the server's key pair is read from its key
//! file, generated there (0600) on first start; `--insecure-plaintext` turns it off and
//! `--curve` turns it on for loopback.
//!
//! With `--http ADDR` it also serves the HTTP API, the dashboard and `/metrics`
//! ([`crate::http`]); with `--http` and no `--listen`, it serves HTTP only. On PostgreSQL
//! operators' requests (the HTTP side, and over ZeroMQ those that change or list jobs and
//! queues) have database connections of their own (`--admin-pool-size`), so requests that
//! wait (on a lock an open transaction holds, behind a slow search) never take the
//! connections the workers' claims and outcomes need; and their statements wait at most
//! `--admin-lock-timeout` for a lock, so a held row costs such a request an error, not the
//! server. Both sides share one set of whole-table readings (`hopper::readings`): a
//! reading of the counts by state taken for the dashboard serves a ZeroMQ `queue_stats`,
//! and back, and an expensive one is reused a while.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use hopper::backend::Backend;
use hopper::{Health, PgOptions};
use hopper_server::{Auth, ServeConfig, Server, ServerKeys};

use crate::outage;

/// `hopper serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The ZeroMQ endpoint to bind (port 0 picks a free port; the bound one is printed).
    /// Default: tcp://127.0.0.1:7010, unless --http is given without --listen, which
    /// serves HTTP only.
    #[arg(long, env = "HOPPER_LISTEN")]
    pub listen: Option<String>,
    /// The file of accepted tokens, one per line (`#` comments allowed), each a bare token
    /// (admin) or `client TOKEN`, `worker TOKEN`, `admin TOKEN`; at least 16 characters
    /// each, the file readable by its owner only. Created with a new admin token (mode
    /// 0600) if it does not exist. Default: ~/.config/hopper/serve.token.
    #[arg(long, env = "HOPPER_TOKEN_FILE", conflicts_with = "insecure_no_auth")]
    pub token_file: Option<PathBuf>,
    /// Accept every peer without a token.
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// Encrypt with CURVE even on loopback (it is always on for other endpoints).
    #[arg(long, conflicts_with = "insecure_plaintext")]
    pub curve: bool,
    /// Serve in plaintext on an endpoint other hosts can reach (tokens then travel in
    /// clear). Without it, a non-loopback --listen uses CURVE.
    #[arg(long)]
    pub insecure_plaintext: bool,
    /// The server's CURVE key pair (Z85, `public = …` and `secret = …`), created (mode 0600)
    /// if it does not exist. Peers are given the public key. Default: serve.key beside the
    /// token file.
    #[arg(long, env = "HOPPER_KEY_FILE")]
    pub key_file: Option<PathBuf>,
    /// Most connections held at once; past it new peers' handshakes are refused.
    #[arg(long, default_value_t = 10_000)]
    pub max_connections: usize,
    /// Database connections in the pool; the server holds one more for LISTEN. One peer's
    /// requests execute on at most a quarter of them at once (at least one), all peers'
    /// on all but a quarter (the rest is kept for claims and outcomes).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub pool_size: u16,
    /// Database connections of operators' requests (on PostgreSQL), apart from --pool-size:
    /// the HTTP API and dashboard, and the ZeroMQ requests that change or list jobs and
    /// queues (cancel, retry, delete, list_jobs, update_queue, ...). Such requests waiting
    /// on a lock or a slow search wait on these, never on the workers'.
    #[arg(long, alias = "http-pool-size", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub admin_pool_size: u16,
    /// The longest an operator's request (see --admin-pool-size) waits for a lock another
    /// transaction holds (a job's or a queue's row), past which it is answered 503 over HTTP,
    /// a transient error over ZeroMQ (e.g. 5s, 500ms; 0s: the server's own setting). Behind
    /// a transaction pooler (--pooler transaction), it bounds the requests that change jobs
    /// and queues (cancel, retry, delete, clear, update_queue...).
    #[arg(long, alias = "http-lock-timeout", default_value = "5s")]
    pub admin_lock_timeout: String,
    /// The node id the server's leases are held under. Default: derived from the host,
    /// the schema and the listen endpoint, so a restart keeps its in-flight jobs.
    #[arg(long)]
    pub node_id: Option<uuid::Uuid>,
    /// Peers must send something this often; a worker silent for 3 periods is dropped
    /// and its jobs retried (e.g. 5s, 500ms).
    #[arg(long, default_value = "5s")]
    pub heartbeat: String,
    /// Lease granted per order, renewed by each worker heartbeat.
    #[arg(long, default_value = "30s")]
    pub lease: String,
    /// Another node (server or direct worker) silent this long is dead; its jobs are
    /// released.
    #[arg(long, default_value = "30s")]
    pub node_dead_after: String,
    /// The HTTP API and dashboard.
    #[command(flatten)]
    pub http: crate::http::HttpArgs,
}

/// The ZeroMQ endpoint when none is given and HTTP is not asked for.
pub const DEFAULT_LISTEN: &str = "tcp://127.0.0.1:7010";

/// The backend of operators' requests (HTTP, and ZeroMQ's admin requests): on PostgreSQL
/// a pool of `size` connections of its own (see the module docs) whose statements wait at
/// most `lock_timeout` for a lock, otherwise `shared` (SQLite has one writer and no row
/// locks to wait on).
async fn admin_backend(
    url: &str,
    options: &PgOptions,
    (size, lock_timeout): (u16, Duration),
    shared: Arc<dyn Backend>,
) -> anyhow::Result<Arc<dyn Backend>> {
    if url.starts_with("sqlite:") {
        return Ok(shared);
    }
    let options = options
        .clone()
        .with_pool_size(usize::from(size))
        .with_lock_timeout(lock_timeout);
    let backend = hopper::connect(url, crate::connect_options(options, crate::Missing::Refuse))
        .await
        .context("opening the database connections of operators' requests")?;
    Ok(backend)
}

fn duration(what: &str, text: &str) -> anyhow::Result<Duration> {
    hopper_cli::duration::parse_duration(&format!("--{what}"), text)
}

/// Runs the server until SIGINT or SIGTERM.
pub async fn run(url: &str, pg: PgOptions, args: ServeArgs) -> anyhow::Result<()> {
    crate::open_files::raise();
    let schema = pg.schema.clone();
    let schema = schema.as_str();
    let heartbeat = duration("heartbeat", &args.heartbeat)?;
    let lease = duration("lease", &args.lease)?;
    let node_dead_after = duration("node-dead-after", &args.node_dead_after)?;
    let lock = duration("admin-lock-timeout", &args.admin_lock_timeout)?;
    // Every flag is checked before the database is opened and migrated: a refused one
    // changes nothing. `Server::start` checks the whole `ServeConfig` again.
    hopper_cli::duration::check_serve_timing(heartbeat, lease, node_dead_after)?;
    hopper_core::limits::check_count("--max-connections", args.max_connections)?;
    let http = args.http.settings()?;
    // --http without --listen: HTTP only. Neither: ZeroMQ on the default endpoint.
    let listen = args
        .listen
        .clone()
        .or_else(|| args.http.http.is_none().then(|| DEFAULT_LISTEN.to_owned()));
    let (auth, curve) = match &listen {
        Some(listen) => (Some(auth(&args)?), curve_keys(&args, listen)?),
        None => (None, None),
    };
    let options = pg.with_pool_size(usize::from(args.pool_size));
    // A database that is starting, restarting or shutting down is waited for (the server
    // may be started with it); anything else fails at once.
    let backend = outage::retry_if("opening the database", outage::is_transient, || async {
        // `serve` migrates, so it creates a missing SQLite file as `migrate` does.
        let options = crate::connect_options(options.clone(), crate::Missing::Create);
        let backend = hopper::connect(url, options)
            .await
            .map_err(|e| anyhow::Error::new(e).context("cannot open the database"))?;
        backend
            .migrate()
            .await
            .map_err(|e| anyhow::Error::new(e).context("migrating the database"))?;
        anyhow::Ok(backend)
    })
    .await?;
    // The recorder goes in before the server starts, so its metrics are all recorded.
    let prometheus = crate::http::install_metrics(&args.http)?;
    let _gauges = crate::telemetry::queue_gauges(&backend);
    let pool = (args.admin_pool_size, lock);
    let admin = admin_backend(url, &options, pool, backend.clone()).await?;
    // One set of whole-table readings (counts by state, per-minute figures) for both
    // sides: a reading taken for the dashboard serves a ZeroMQ `queue_stats`, and back.
    let readings = hopper::readings::Readings::default();
    let mut server = None;
    if let (Some(listen), Some(auth)) = (listen, auth) {
        let mut config = ServeConfig::new(backend.clone(), listen.clone(), auth);
        config.admin = Some(admin.clone());
        config.readings = readings.clone();
        config.node_id = args.node_id.unwrap_or_else(|| {
            hopper_server::stable_node_id(&[&hopper::maintenance::host_name(), schema, &listen])
        });
        config.heartbeat = heartbeat;
        config.lease = lease;
        config.node_dead_after = node_dead_after;
        config.max_connections = args.max_connections;
        config.pool_size = usize::from(args.pool_size);
        config.insecure_plaintext = args.insecure_plaintext;
        config.curve = curve;
        config.client = crate::telemetry::tracing_client(&backend);
        let public_key = config.curve.as_ref().map(|k| k.public.clone());
        let start = || async { Ok(Server::start(config.clone()).await?) };
        let started = outage::retry_if("starting the server", outage::is_transient, start).await?;
        eprintln!(
            "hopper serve: listening on {} (node {}, schema {schema})",
            started.endpoint(),
            started.node_id()
        );
        match public_key {
            Some(key) => eprintln!(
                "hopper serve: CURVE on; peers need the server key {key} (server_key=, HOPPER_SERVER_KEY)"
            ),
            None if args.insecure_plaintext => eprintln!(
                "hopper serve: WARNING: --insecure-plaintext: traffic, tokens included, is not encrypted"
            ),
            None => {}
        }
        server = Some(started);
    }
    // One health for the process: the ZeroMQ server's tasks and the HTTP server's.
    let health = server.as_ref().map_or_else(Health::new, |s| s.health());
    let http = match args.http.http {
        Some(_) => {
            crate::http::start(&args.http, http, admin, readings, prometheus, &health).await?
        }
        None => None,
    };
    tokio::select! {
        _ = hopper::shutdown_signal() => tracing::info!("signal received; stopping"),
        failure = health.failed() => tracing::error!(%failure, "unhealthy; stopping"),
    }
    if let Some(server) = server {
        server.shutdown().await;
    }
    if let Some(http) = http {
        http.shutdown().await?;
    }
    match health.failure() {
        Some(failure) => anyhow::bail!("stopped unhealthy: {failure}"),
        None => Ok(()),
    }
}

/// The CURVE key pair when the server encrypts: with --curve, or on an endpoint other hosts
/// can reach unless --insecure-plaintext. Read from the key file, created on first start.
fn curve_keys(args: &ServeArgs, listen: &str) -> anyhow::Result<Option<ServerKeys>> {
    if !wants_curve(args.curve, args.insecure_plaintext, listen) {
        return Ok(None);
    }
    let path = match (&args.key_file, &args.token_file) {
        (Some(path), _) => path.clone(),
        (None, Some(token_file)) => hopper_server::key_path_beside(token_file),
        (None, None) => hopper_server::default_key_path(),
    };
    let (keys, created) = ServerKeys::read_or_create(&path)
        .with_context(|| format!("the CURVE key file {}", path.display()))?;
    if created {
        eprintln!(
            "hopper serve: generated a CURVE key pair in {} (readable by this user only)",
            path.display()
        );
    }
    Ok(Some(keys))
}

/// CURVE is on with --curve, and off loopback unless --insecure-plaintext.
fn wants_curve(curve: bool, insecure_plaintext: bool, listen: &str) -> bool {
    curve || (!insecure_plaintext && !hopper_server::is_loopback(listen))
}

/// Reads the tokens, or generates the first one.
fn auth(args: &ServeArgs) -> anyhow::Result<Auth> {
    if args.insecure_no_auth {
        eprintln!(
            "hopper serve: WARNING: --insecure-no-auth: any peer that reaches the endpoint may submit and run jobs"
        );
        return Ok(Auth::Insecure);
    }
    let path = args
        .token_file
        .clone()
        .unwrap_or_else(hopper_server::default_token_path);
    if path.exists() {
        let credentials = hopper_server::read_credentials(&path)
            .with_context(|| format!("reading the token file {}", path.display()))?;
        if credentials.is_empty() {
            anyhow::bail!("the token file {} holds no token", path.display());
        }
        return Ok(Auth::Credentials(credentials));
    }
    let token = hopper_server::write_new_token(&path)
        .with_context(|| format!("writing a new token to {}", path.display()))?;
    eprintln!(
        "hopper serve: no token configured; generated one in {} (readable by this user only). \
         Give it to clients and workers (HOPPER_TOKEN, or ?token= in tcp:// URLs).",
        path.display()
    );
    Ok(Auth::Tokens(vec![token]))
}

#[cfg(test)]
mod tests {
    use super::wants_curve;

    #[test]
    fn curve_is_on_off_loopback_unless_plaintext_is_asked_for() {
        assert!(wants_curve(false, false, "tcp://0.0.0.0:7010"));
        assert!(wants_curve(false, false, "tcp://10.1.2.3:7010"));
        assert!(!wants_curve(false, true, "tcp://0.0.0.0:7010"));
        assert!(!wants_curve(false, false, "tcp://127.0.0.1:7010"));
        assert!(wants_curve(true, false, "tcp://127.0.0.1:7010"));
    }
}
