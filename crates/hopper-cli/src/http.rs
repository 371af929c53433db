//! `hopper serve --http ADDR`: the HTTP JSON API, the dashboard and `/metrics`
//! (`hopper-web`) served by the binary, beside the ZeroMQ server or alone.
//!
//! Authentication is on by default, as for the ZeroMQ server:
//!
//! 1. tokens from `HOPPER_HTTP_ADMIN_TOKENS` / `HOPPER_HTTP_READ_TOKENS` when either is set;
//! 2. else the tokens in the HTTP token file (`--http-token-file`, default
//!    `$XDG_CONFIG_HOME/hopper/http.token` or `~/.config/hopper/http.token`): one a line,
//!    a bare token or `admin TOKEN` for an admin, `read TOKEN` for a read-only token; the
//!    file readable by its owner only, as the ZeroMQ token file;
//! 3. else a new admin token is generated into that file, readable by this user only
//!    (mode 0600), and the path is printed.
//!
//! `--http-open` turns authentication off, and is refused on any address but loopback.
//!
//! In every mode, a request whose `Host` does not name this server (its bound address,
//! `localhost` on loopback, or a name given with `--http-host` / `HOPPER_HTTP_HOSTS`) is
//! refused, and so are mutations from another origin or with a body that is not JSON:
//! see `hopper_web::cross_site`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use hopper::Health;
use hopper::backend::Backend;
use hopper::supervise::{Policy, supervise};
use hopper_web::auth::Role;
use hopper_web::{AllowedHosts, AuthConfig, ConnectionLimits, Tls, WebState};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The HTTP options of `hopper serve`.
#[derive(Debug, Args)]
pub struct HttpArgs {
    /// Also serve the HTTP API, the dashboard and /metrics on this address (e.g.
    /// 127.0.0.1:7011; port 0 picks a free port, printed). Without --listen, only HTTP is
    /// served.
    #[arg(long, env = "HOPPER_HTTP", value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// Serve the HTTP side without authentication (loopback addresses only).
    #[arg(long, requires = "http", conflicts_with = "http_token_file")]
    pub http_open: bool,
    /// The file of HTTP tokens, one per line (`#` comments allowed): a bare token or
    /// `admin TOKEN` for an admin, `read TOKEN` for a read-only token; readable by its owner
    /// only. Used when HOPPER_HTTP_ADMIN_TOKENS and HOPPER_HTTP_READ_TOKENS are unset.
    /// Created with a new admin token (mode 0600) if it does not exist. Default:
    /// ~/.config/hopper/http.token.
    #[arg(long, env = "HOPPER_HTTP_TOKEN_FILE", requires = "http")]
    pub http_token_file: Option<PathBuf>,
    /// A host name clients use to reach the HTTP side (e.g. hopper.example.com, behind a
    /// proxy); repeat or comma-separate for several. Requests naming any other host are
    /// refused (DNS-rebinding defence); the bound address and, on loopback, localhost are
    /// always accepted.
    #[arg(
        long,
        env = "HOPPER_HTTP_HOSTS",
        value_name = "NAME",
        value_delimiter = ',',
        requires = "http"
    )]
    pub http_host: Vec<String>,
    /// Serve HTTPS with this PEM certificate chain (the server's certificate first), with
    /// --http-tls-key. Needed off loopback unless --http-insecure-plaintext.
    #[arg(long, env = "HOPPER_HTTP_TLS_CERT", requires_all = ["http", "http_tls_key"], value_name = "PEM")]
    pub http_tls_cert: Option<PathBuf>,
    /// The unencrypted PEM private key of --http-tls-cert.
    #[arg(long, env = "HOPPER_HTTP_TLS_KEY", requires_all = ["http", "http_tls_cert"], value_name = "PEM")]
    pub http_tls_key: Option<PathBuf>,
    /// Serve plain HTTP off loopback (tokens and data in cleartext), e.g. behind a proxy on
    /// a private network that terminates TLS.
    #[arg(long, requires = "http", conflicts_with = "http_tls_cert")]
    pub http_insecure_plaintext: bool,
    /// Most HTTP connections open at once; past it, new ones wait until one closes.
    #[arg(long, default_value_t = hopper_web::DEFAULT_MAX_CONNECTIONS as u32, value_parser = clap::value_parser!(u32).range(1..=1_000_000), requires = "http")]
    pub http_max_connections: u32,
    /// Longest an HTTP connection may take to send a request's headers, and may stay idle
    /// between two requests, before it is closed (e.g. 10s, 500ms).
    #[arg(long, default_value = "10s", requires = "http")]
    pub http_header_timeout: String,
    /// Longest an authenticated request's body may take to arrive after its headers (e.g.
    /// 30s); a slower one is answered 408 and its connection closed.
    #[arg(long, default_value = "30s", requires = "http")]
    pub http_body_timeout: String,
    /// Longest a response may wait for the peer to read any of it (e.g. 30s); a peer that
    /// stops reading is closed. A slow client that keeps reading is never cut.
    #[arg(long, default_value = "30s", requires = "http")]
    pub http_send_timeout: String,
}

impl HttpArgs {
    /// The HTTPS certificate and key of the flags, read and checked; none for plain HTTP,
    /// which off loopback needs --http-insecure-plaintext (bearer tokens cross the network
    /// in every request).
    fn tls(&self) -> anyhow::Result<Option<Tls>> {
        let (Some(cert), Some(key)) = (&self.http_tls_cert, &self.http_tls_key) else {
            if let Some(addr) = self.http
                && !addr.ip().is_loopback()
                && !self.http_insecure_plaintext
            {
                anyhow::bail!(
                    "--http {addr} is off loopback: serve HTTPS with --http-tls-cert and \
                     --http-tls-key, or pass --http-insecure-plaintext behind a proxy that \
                     terminates TLS (tokens would cross the network in cleartext)"
                );
            }
            return Ok(None);
        };
        Ok(Some(Tls::from_pem_files(cert, key)?))
    }

    /// The connection limits and the body timeout of the flags, checked: timeouts more
    /// than zero and at most ten years.
    fn limits(&self) -> anyhow::Result<(ConnectionLimits, Duration)> {
        let timeout = |flag: &str, value: &str| -> anyhow::Result<Duration> {
            let timeout = hopper_cli::duration::parse_duration(flag, value)?;
            Ok(hopper_core::limits::check_interval(flag, timeout)?)
        };
        let header = timeout("--http-header-timeout", &self.http_header_timeout)?;
        let body = timeout("--http-body-timeout", &self.http_body_timeout)?;
        let send = timeout("--http-send-timeout", &self.http_send_timeout)?;
        let max = usize::try_from(self.http_max_connections).unwrap_or(usize::MAX);
        let limits = ConnectionLimits::default()
            .with_max_connections(max)
            .with_header_timeout(header)
            .with_send_timeout(send);
        Ok((limits, body))
    }

    /// Every setting of the flags that can be checked before the database is opened:
    /// the limits, the HTTPS files and the tokens, read once.
    pub fn settings(&self) -> anyhow::Result<HttpSettings> {
        let (limits, body_timeout) = self.limits()?;
        let tls = self.tls()?;
        let auth = match self.http {
            Some(addr) => Some(auth(self, addr)?),
            None => None,
        };
        Ok(HttpSettings {
            limits,
            body_timeout,
            tls,
            auth,
        })
    }
}

/// The HTTP flags read and checked ([`HttpArgs::settings`]).
#[derive(Debug)]
pub struct HttpSettings {
    limits: ConnectionLimits,
    body_timeout: Duration,
    tls: Option<Tls>,
    /// The authentication in force; `None` without `--http`.
    auth: Option<AuthConfig>,
}

/// The running HTTP server.
#[derive(Debug)]
pub struct HttpServer {
    stop: CancellationToken,
    task: JoinHandle<()>,
    _upkeep: hopper_web::metrics::Upkeep,
}

impl HttpServer {
    /// Stops accepting and lets in-flight requests finish. The serve loop runs under
    /// [`hopper::supervise`]: its failures were logged, restarted, and reported to the
    /// process's health.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.stop.cancel();
        self.task
            .await
            .context("the HTTP server's supervisor panicked")
    }
}

/// Installs the Prometheus recorder when HTTP is asked for (inside OpenTelemetry's, when
/// metrics are exported: `crate::telemetry`). Call before any runtime or
/// server starts, so their metrics are recorded from the first job.
pub fn install_metrics(args: &HttpArgs) -> anyhow::Result<Option<PrometheusHandle>> {
    let prometheus = match args.http {
        Some(_) => Some(hopper_web::metrics::build_recorder().context("the metrics recorder")?),
        None => None,
    };
    let handle = prometheus.as_ref().map(|p| p.handle());
    crate::telemetry::install_recorder(prometheus)?;
    Ok(handle)
}

/// Binds and serves the HTTP side in the background when `--http` was given, within the
/// limits and over HTTPS as `settings` say ([`HttpArgs::settings`], read and checked once,
/// before the database is opened). Its whole-table readings go through `readings`, shared
/// with the ZeroMQ server's.
pub async fn start(
    args: &HttpArgs,
    HttpSettings {
        limits,
        body_timeout,
        tls,
        auth,
    }: HttpSettings,
    backend: Arc<dyn Backend>,
    readings: hopper::readings::Readings,
    prometheus: Option<PrometheusHandle>,
    health: &Health,
) -> anyhow::Result<Option<HttpServer>> {
    let (Some(addr), Some(auth)) = (args.http, auth) else {
        return Ok(None);
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let open = auth.is_open();
    let mut hosts = AllowedHosts::for_address(addr);
    for name in args
        .http_host
        .iter()
        .map(|n| n.trim())
        .filter(|n| !n.is_empty())
    {
        hosts = hosts.with_name(name).context("--http-host")?;
    }
    let mut state = WebState::new(backend, auth)
        .with_body_timeout(body_timeout)
        .with_readings(readings)
        .with_allowed_hosts(hosts)
        .with_health(health.clone());
    let prometheus = prometheus.context("the metrics recorder was not installed")?;
    state = state.with_prometheus(prometheus.clone());
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding the HTTP address {addr}"))?;
    let local = listener.local_addr()?;
    let stop = CancellationToken::new();
    if let Some(tls) = &tls {
        reload_on_hangup(tls.clone(), stop.clone())?;
    }
    // A restarted serve loop binds the address again; the first uses the bound listener.
    let first = Arc::new(std::sync::Mutex::new(Some(listener)));
    let task = supervise("http", health, Policy::default(), stop.clone(), {
        let stop = stop.clone();
        move || {
            let (state, stop, tls) = (state.clone(), stop.clone(), tls.clone());
            let listener = first.lock().ok().and_then(|mut first| first.take());
            async move {
                let listener = match listener {
                    Some(listener) => listener,
                    None => tokio::net::TcpListener::bind(local).await?,
                };
                let router = hopper_web::router(state);
                let stop = stop.cancelled_owned();
                hopper_web::serve_connections(listener, router, limits, tls, stop).await
            }
        }
    });
    eprintln!(
        "hopper serve: HTTP API on {scheme}://{local}/api/v1, dashboard on {scheme}://{local}/, metrics on {scheme}://{local}/metrics{}",
        if open { " (NO authentication)" } else { "" }
    );
    Ok(Some(HttpServer {
        stop,
        task,
        _upkeep: hopper_web::metrics::spawn_upkeep(prometheus),
    }))
}

/// Reads the HTTPS certificate and key again at each SIGHUP (a renewed certificate), until
/// `stop`: served from the next handshake on, or, if they cannot be served, the pair
/// served before stays and the log says why.
fn reload_on_hangup(tls: Tls, stop: CancellationToken) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = signal(SignalKind::hangup()).context("listening for SIGHUP")?;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                hangup = hangups.recv() => if hangup.is_none() { return },
            }
            match tls.reload() {
                Ok(()) => tracing::info!("SIGHUP: reloaded the HTTPS certificate and key"),
                Err(e) => tracing::warn!(
                    error = %e,
                    "SIGHUP: kept the HTTPS certificate served so far"
                ),
            }
        }
    });
    Ok(())
}

/// The authentication in force, from the flags, the environment or the token file.
fn auth(args: &HttpArgs, addr: SocketAddr) -> anyhow::Result<AuthConfig> {
    if args.http_open {
        if !addr.ip().is_loopback() {
            anyhow::bail!(
                "--http-open is allowed on loopback addresses only (127.0.0.1, [::1]), not {addr}"
            );
        }
        eprintln!(
            "hopper serve: WARNING: --http-open: the HTTP API and dashboard accept anyone who can reach {addr}"
        );
        return Ok(AuthConfig::open());
    }
    let configured = [
        hopper_web::auth::ENV_ADMIN_TOKENS,
        hopper_web::auth::ENV_READ_TOKENS,
    ]
    .iter()
    .any(|name| std::env::var(name).is_ok_and(|v| !v.trim().is_empty()));
    if configured {
        return AuthConfig::from_env().context("the HTTP tokens from the environment");
    }
    let path = args
        .http_token_file
        .clone()
        .unwrap_or_else(default_token_path);
    if path.exists() {
        return read_token_file(&path)
            .with_context(|| format!("reading the HTTP token file {}", path.display()));
    }
    let token = hopper_server::write_new_token(&path)
        .with_context(|| format!("writing a new HTTP token to {}", path.display()))?;
    eprintln!(
        "hopper serve: no HTTP token configured; generated an admin token in {} (readable by \
         this user only). Send it as Authorization: Bearer <token>, or paste it into the \
         dashboard.",
        path.display()
    );
    Ok(AuthConfig::tokens([token], Vec::<String>::new())?)
}

/// The tokens of the HTTP token file at `path`: one a line, a bare token or `admin TOKEN`
/// for an admin, `read TOKEN` for a read-only token. Refused, with the line number (never
/// the token): a file that the group or others may read or write, an unknown role, a weak
/// token, and a file without a token.
fn read_token_file(path: &std::path::Path) -> anyhow::Result<AuthConfig> {
    let (mut admin, mut read) = (Vec::new(), Vec::new());
    for line in hopper_server::read_token_lines(path)? {
        let number = line.number;
        let role: Role = match &line.role {
            None => Role::Admin,
            Some(role) => role
                .parse()
                .map_err(|e| hopper_server::invalid_line(path, number, e))?,
        };
        hopper_web::auth::check_token(role, &line.token)
            .map_err(|e| hopper_server::invalid_line(path, number, e))?;
        match role {
            Role::Admin => admin.push(line.token),
            Role::Read => read.push(line.token),
        }
    }
    if admin.is_empty() && read.is_empty() {
        anyhow::bail!(
            "{} holds no token: write one a line, `read TOKEN` for a read-only one",
            path.display()
        );
    }
    Ok(AuthConfig::tokens(admin, read)?)
}

/// `$XDG_CONFIG_HOME/hopper/http.token`, else `~/.config/hopper/http.token`.
fn default_token_path() -> PathBuf {
    std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from("."))
        .join("hopper")
        .join("http.token")
}
