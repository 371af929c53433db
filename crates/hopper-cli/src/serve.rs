//! `hopper serve`: runs the network server (`hopper-server`) against the database.
//!
//! Security is on by default: with no `--token-file` and no `--insecure-no-auth`, the
//! server reads its tokens (each with its role) from the default token file, and if there
//! is none it generates an admin token, writes it there readable by this user only (mode
//! 0600) and says where. A token file that others may read, or that holds a token shorter
//! than 16 characters, is refused.
//!
//! With `--http ADDR` it also serves the HTTP API, the dashboard and `/metrics`
//! ([`crate::http`]); with `--http` and no `--listen`, it serves HTTP only.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use hopper::PgOptions;
use hopper_server::{Auth, ServeConfig, Server};

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
    /// Accept every peer without a token. Traffic is never encrypted; see docs/protocol.md.
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// Database connections in the pool; the server holds one more for LISTEN.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub pool_size: u16,
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

fn duration(what: &str, text: &str) -> anyhow::Result<Duration> {
    hopper_cli::duration::parse_duration(&format!("--{what}"), text)
}

/// Runs the server until SIGINT or SIGTERM.
pub async fn run(url: Option<&str>, schema: &str, args: ServeArgs) -> anyhow::Result<()> {
    let heartbeat = duration("heartbeat", &args.heartbeat)?;
    let lease = duration("lease", &args.lease)?;
    let node_dead_after = duration("node-dead-after", &args.node_dead_after)?;
    hopper_cli::duration::check_serve_timing(heartbeat, lease)?;
    // --http without --listen: HTTP only. Neither: ZeroMQ on the default endpoint.
    let listen = args
        .listen
        .clone()
        .or_else(|| args.http.http.is_none().then(|| DEFAULT_LISTEN.to_owned()));
    let auth = if listen.is_some() {
        Some(auth(&args)?)
    } else {
        None
    };
    let Some(url) = url else {
        anyhow::bail!("no database: set DATABASE_URL or pass --database-url postgres://…");
    };
    let options = PgOptions {
        schema: schema.to_owned(),
        pool_size: usize::from(args.pool_size),
        ..PgOptions::default()
    };
    let backend = hopper::connect(url, options)
        .await
        .map_err(|e| anyhow::Error::new(e).context("cannot open the database"))?;
    backend
        .migrate()
        .await
        .map_err(|e| anyhow::Error::new(e).context("migrating the database"))?;
    // The recorder goes in before the server starts, so its metrics are all recorded.
    let prometheus = crate::http::install_metrics(&args.http)?;
    let mut server = None;
    if let (Some(listen), Some(auth)) = (listen, auth) {
        let mut config = ServeConfig::new(backend.clone(), listen.clone(), auth);
        config.node_id = args
            .node_id
            .unwrap_or_else(|| hopper_server::stable_node_id(&[&host_name(), schema, &listen]));
        config.heartbeat = heartbeat;
        config.lease = lease;
        config.node_dead_after = node_dead_after;
        let started = Server::start(config).await?;
        eprintln!(
            "hopper serve: listening on {} (node {}, schema {schema})",
            started.endpoint(),
            started.node_id()
        );
        server = Some(started);
    }
    let http = crate::http::start(&args.http, backend, prometheus).await?;
    hopper::shutdown_signal().await;
    tracing::info!("signal received; stopping");
    if let Some(server) = server {
        server.shutdown().await;
    }
    if let Some(http) = http {
        http.shutdown().await?;
    }
    Ok(())
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

fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}
