//! # hopper-web
//!
//! hopper's HTTP side, as an [`axum::Router`] over any [`hopper::backend::Backend`]:
//!
//! - an **HTTP JSON API** under `/api/v1` (enqueue, inspect, list with filters and cursor
//!   pagination, retry, cancel, delete, bulk retry, queues, stats), described by an
//!   OpenAPI 3.1 document served at `/api/v1/openapi.json`;
//! - a **web dashboard** at `/` (queues, counts by state, throughput and latency over the
//!   last hour, job list and detail, retry and cancel buttons), live by polling the API,
//!   its assets compiled into the binary;
//! - **Prometheus metrics** at `/metrics`: jobs by queue and state read at scrape time,
//!   plus the runtime's counters and histograms when [`metrics::install_recorder`] was
//!   called in this process;
//! - **health** at `/health`, open to anyone: 503 once a supervised background task of the
//!   process gave up ([`WebState::with_health`]);
//! - **authentication** on by default: bearer tokens with a read-only and an admin role
//!   ([`AuthConfig`]);
//! - **DNS-rebinding and cross-site defences** in every authentication mode: a foreign
//!   `Host` is refused, and so are mutations from another origin or with a body that is
//!   not JSON ([`AllowedHosts`], [`cross_site`]).
//!
//! Nest it in your own app, or run it alone with [`serve`]:
//!
//! ```no_run
//! use hopper_web::{AuthConfig, WebState};
//!
//! # async fn run(backend: std::sync::Arc<dyn hopper::backend::Backend>) -> hopper_web::Result<()> {
//! let prometheus = hopper_web::metrics::install_recorder()?;
//! let state = WebState::new(backend, AuthConfig::from_env()?).with_prometheus(prometheus);
//!
//! // Alone:
//! hopper_web::serve("127.0.0.1:7011".parse().expect("an address"), state.clone()).await?;
//!
//! // Or inside an application's router, under a prefix:
//! let app: axum::Router = axum::Router::new().nest("/hopper", hopper_web::router(state));
//! # Ok(()) }
//! ```
//!
//! The endpoints, the authentication and curl examples are in `docs/http-api.md`; the
//! metric names in `docs/metrics.md` (and in [`hopper::metrics`]).

mod api;
pub mod auth;
mod body;
mod connections;
pub mod cross_site;
mod dashboard;
mod error;
mod health;
pub mod metrics;
mod send_timeout;
mod tls;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, header};
use axum::middleware;
use axum::response::Response;
use axum::routing::get;
use hopper::Client;
use hopper::backend::Backend;
use hopper::core::log_limit::{LogThrottle, capped};
use metrics_exporter_prometheus::PrometheusHandle;
use tracing::Instrument;

pub use auth::{AuthConfig, Role, Secret};
pub use body::DEFAULT_BODY_TIMEOUT;
pub use connections::{
    ConnectionLimits, DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_SEND_TIMEOUT,
    TIMEOUT_BOUNDS, serve_connections,
};
pub use cross_site::AllowedHosts;
pub use error::{ApiError, Error, Result};
pub use hopper::readings::{Readings, StatsReuse};
pub use tls::Tls;

/// The default limit on a request body: 16 MiB, room for a batch of jobs (one job's
/// arguments may be up to 1 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// The most jobs one batch request may enqueue.
pub const MAX_BATCH_JOBS: usize = 10_000;

/// How many refused requests are logged per [`REFUSALS_INTERVAL`]; the others are
/// counted, and the count is logged with the next line let through.
pub const REFUSALS_LOGGED: u32 = 10;

/// The interval of [`REFUSALS_LOGGED`].
pub const REFUSALS_INTERVAL: Duration = Duration::from_secs(60);

/// What the handlers share: the backend, who may call, and the metrics to export. Cheap
/// to clone.
#[derive(Clone)]
pub struct WebState {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    client: Client,
    auth: AuthConfig,
    allowed_hosts: AllowedHosts,
    prometheus: Option<PrometheusHandle>,
    max_body_bytes: usize,
    body_timeout: Duration,
    readings: Readings,
    refusals: Arc<LogThrottle>,
    health: Option<hopper::Health>,
}

impl std::fmt::Debug for WebState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebState")
            .field("backend", &self.inner.client.backend().name())
            .field("auth", &self.inner.auth)
            .field("allowed_hosts", &self.inner.allowed_hosts)
            .field("prometheus", &self.inner.prometheus.is_some())
            .field("max_body_bytes", &self.inner.max_body_bytes)
            .field("body_timeout", &self.inner.body_timeout)
            .field("stats_reuse", &self.inner.readings.reuse())
            .finish()
    }
}

impl WebState {
    /// State over `backend`, with `auth` deciding who may call. Only the loopback names
    /// are accepted in `Host` ([`AllowedHosts::loopback`]) until
    /// [`WebState::with_allowed_hosts`] says more ([`serve`] adds its bound address).
    pub fn new(backend: Arc<dyn Backend>, auth: AuthConfig) -> Self {
        WebState {
            inner: Arc::new(Inner {
                client: Client::new(backend),
                auth,
                allowed_hosts: AllowedHosts::loopback(),
                prometheus: None,
                max_body_bytes: DEFAULT_MAX_BODY_BYTES,
                body_timeout: DEFAULT_BODY_TIMEOUT,
                readings: Readings::default(),
                refusals: Arc::new(LogThrottle::per_interval(
                    REFUSALS_LOGGED,
                    REFUSALS_INTERVAL,
                )),
                health: None,
            }),
        }
    }

    /// Sets the names and addresses accepted in a request's `Host` (and, for the names
    /// added with [`AllowedHosts::with_name`], in `Origin`). See [`cross_site`].
    pub fn with_allowed_hosts(self, hosts: AllowedHosts) -> Self {
        self.map(|inner| inner.allowed_hosts = hosts)
    }

    /// The names and addresses accepted in `Host`.
    pub fn allowed_hosts(&self) -> &AllowedHosts {
        &self.inner.allowed_hosts
    }

    /// Also exports the metrics recorded in this process (see [`metrics::install_recorder`]).
    pub fn with_prometheus(self, handle: PrometheusHandle) -> Self {
        self.map(|inner| inner.prometheus = Some(handle))
    }

    /// Answers `GET /health` with `health`: 503 once a supervised task gave up.
    pub fn with_health(self, health: hopper::Health) -> Self {
        self.map(|inner| inner.health = Some(health))
    }

    /// Sets the limit on request bodies (default [`DEFAULT_MAX_BODY_BYTES`]). Larger
    /// bodies are refused with 413.
    pub fn with_max_body_bytes(self, bytes: usize) -> Self {
        self.map(|inner| inner.max_body_bytes = bytes)
    }

    /// Sets how long an authenticated request's body may take to arrive, from the end of
    /// its headers (default [`DEFAULT_BODY_TIMEOUT`]), held to [`TIMEOUT_BOUNDS`]. A slower
    /// one is answered 408 and its connection closed.
    pub fn with_body_timeout(self, timeout: Duration) -> Self {
        let timeout = timeout.clamp(*TIMEOUT_BOUNDS.start(), *TIMEOUT_BOUNDS.end());
        self.map(|inner| inner.body_timeout = timeout)
    }

    /// Sets when the whole-table readings (counts by queue and state, what finished per
    /// minute) are served again instead of taken anew (default [`StatsReuse::default`]: a
    /// reading that took 50 ms or more, for ten times as long as it took, a minute at
    /// most). Requests that arrive while one is taken share it either way. The same as
    /// [`WebState::with_readings`] with fresh [`Readings`] under `reuse`.
    pub fn with_stats_reuse(self, reuse: StatsReuse) -> Self {
        self.with_readings(Readings::new(reuse))
    }

    /// Takes and reuses the whole-table readings through `readings`, shared with whatever
    /// else holds a clone of it: `hopper serve` gives the same to its ZeroMQ server
    /// (`hopper_server::ServeConfig::readings`), so that a reading taken for either side
    /// serves both. Share them only with surfaces that read the same database.
    pub fn with_readings(self, readings: Readings) -> Self {
        self.map(|inner| inner.readings = readings)
    }

    /// The whole-table readings in use.
    pub fn readings(&self) -> &Readings {
        &self.inner.readings
    }

    /// The counts by queue and state, through the shared readings.
    pub(crate) async fn queue_stats(&self) -> hopper::Result<Vec<hopper::QueueStats>> {
        let read = self.backend().queue_stats();
        self.inner.readings.queues(read).await
    }

    pub(crate) fn max_body_bytes(&self) -> usize {
        self.inner.max_body_bytes
    }

    pub(crate) fn body_timeout(&self) -> Duration {
        self.inner.body_timeout
    }

    /// The authentication in force.
    pub fn auth(&self) -> &AuthConfig {
        &self.inner.auth
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        self.inner.client.backend()
    }

    pub(crate) fn client(&self) -> &Client {
        &self.inner.client
    }

    pub(crate) fn prometheus(&self) -> Option<&PrometheusHandle> {
        self.inner.prometheus.as_ref()
    }

    /// Logs a refused request as a warning: the method, the path (cut to a few dozen
    /// characters; never the query, which may carry anything) and why. At most
    /// [`REFUSALS_LOGGED`] lines per [`REFUSALS_INTERVAL`]; the next line let through says
    /// how many were left out. Never the credentials: the reasons name no token.
    pub(crate) fn log_refusal(&self, request: &axum::extract::Request, e: &ApiError) {
        let Some(suppressed) = self.inner.refusals.check() else {
            return;
        };
        tracing::warn!(
            method = %capped(request.method().as_str()),
            path = %capped(request.uri().path()),
            status = e.status().as_u16(),
            suppressed,
            "refused an HTTP request: {}",
            e.message()
        );
    }

    fn map(self, f: impl FnOnce(&mut Inner)) -> Self {
        let mut inner = Arc::unwrap_or_clone(self.inner);
        f(&mut inner);
        WebState {
            inner: Arc::new(inner),
        }
    }
}

/// The whole web side: the dashboard at `/`, the API under `/api/v1`, metrics at
/// `/metrics`. Nest it under any prefix; the dashboard uses relative links.
pub fn router(state: WebState) -> Router {
    let protected = api::routes()
        .route("/metrics", get(metrics::scrape))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            body::read_within_deadline,
        ))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_role,
        ));
    Router::new()
        .merge(dashboard::routes())
        .route("/api/v1/openapi.json", get(api::openapi))
        .route("/health", get(health::health))
        .merge(protected)
        .fallback(api::not_found)
        .method_not_allowed_fallback(api::method_not_allowed)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            cross_site::check,
        ))
        .layer(DefaultBodyLimit::max(state.inner.max_body_bytes))
        .layer(middleware::map_response(security_headers))
        .layer(middleware::from_fn(trace_request))
        .with_state(state)
}

/// One span per request (method and path, cut to a few dozen characters: never headers
/// or query strings, so no secret reaches a log), and one event with the status and time
/// taken.
async fn trace_request(request: axum::extract::Request, next: middleware::Next) -> Response {
    let span = tracing::info_span!(
        "http",
        method = %capped(request.method().as_str()),
        path = %capped(request.uri().path()),
    );
    let started = std::time::Instant::now();
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status().as_u16();
    let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
    span.in_scope(|| {
        if response.status().is_server_error() {
            tracing::warn!(status, elapsed_ms, "request failed");
        } else {
            tracing::debug!(status, elapsed_ms, "request");
        }
    });
    response
}

/// Headers every response carries: no sniffing, no framing, no referrer, and a content
/// security policy that allows only the dashboard's own files. A response that says
/// nothing of caching (everything but the dashboard's files: jobs' arguments, metadata,
/// errors, metrics) is not to be stored at all, so that none of it outlives, in a
/// browser's cache on disk, the tab that holds the token.
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        ),
    );
    response
}

/// Serves [`router`] on `addr` until the process ends, within the default
/// [`ConnectionLimits`]. Refuses to run without authentication on anything but a loopback
/// address. The bound address is added to the state's [`AllowedHosts`].
pub async fn serve(addr: SocketAddr, state: WebState) -> Result<()> {
    serve_with_shutdown(addr, state, std::future::pending()).await
}

/// Like [`serve`], stopping gracefully when `shutdown` completes: no new connection is
/// accepted, and the requests in flight finish (for at most 30 s).
pub async fn serve_with_shutdown(
    addr: SocketAddr,
    state: WebState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    if state.auth().is_open() && !addr.ip().is_loopback() {
        return Err(Error::Config(format!(
            "refusing to serve the API without authentication on {addr}: bind a loopback \
             address (127.0.0.1 or [::1]) or configure tokens"
        )));
    }
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let hosts = state.allowed_hosts().clone().with_address(local);
    let state = state.with_allowed_hosts(hosts);
    if state.auth().is_open() {
        tracing::warn!(%local, "HTTP API and dashboard running WITHOUT authentication (loopback only)");
    }
    let _upkeep = state.prometheus().cloned().map(metrics::spawn_upkeep);
    tracing::info!(%local, "HTTP API on http://{local}/api/v1, dashboard on http://{local}/");
    let limits = ConnectionLimits::default();
    serve_connections(listener, router(state), limits, None, shutdown).await?;
    Ok(())
}
