//! Connection establishment: a connection string read as libpq reads it, TLS by rustls,
//! and every connection hopper opens (pool, LISTEN, migrations, tools) made from it.
//!
//! [`PgConnectOptions::parse`] takes a `postgres://` URL or a `key=value` string. The TLS
//! parameters (`sslmode` up to `verify-full`, `sslrootcert`, `sslcert`, `sslkey`) are read
//! here (see `tls.rs` for what each mode checks); everything else, including several hosts
//! (`host=a,b`, `postgres://h1:5432,h2:5432/db`) and `target_session_attrs=read-write`, is
//! tokio-postgres's, which tries the hosts in order and keeps the first that qualifies.

// The connector is cloned for every connection; without `tls` it is `NoTls`, a `Copy`.
#![cfg_attr(
    not(feature = "tls"),
    allow(clippy::clone_on_copy, reason = "rustls's connector is not Copy")
)]

mod conninfo;
mod mode;
#[cfg(feature = "tls")]
mod tls;
// Without the `tls` feature: plaintext only, as libpq built without SSL support.
#[cfg(not(feature = "tls"))]
#[path = "plain.rs"]
mod tls;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Hook, HookError, Manager, ManagerConfig, Pool, RecyclingMethod};
use hopper_core::{Error, Result};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, Config, Connection, Socket};
#[cfg(feature = "tls")]
pub use tokio_postgres_rustls::MakeRustlsConnect;

use tls::TlsSettings;

/// The TLS connector of every connection: rustls's with the `tls` feature,
/// [`tokio_postgres::NoTls`] without it.
pub type PgTls = tls::Connector;

/// The stream of a connection made by [`PgConnectOptions::connect_raw`].
pub type PgTlsStream = <PgTls as MakeTlsConnect<Socket>>::Stream;

/// A parsed connection string: the driver's configuration and the TLS connector built
/// from its `ssl*` parameters. Cheap to clone.
#[derive(Clone)]
pub struct PgConnectOptions {
    config: Config,
    settings: Arc<TlsSettings>,
    tls: PgTls,
}

impl fmt::Debug for PgConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgConnectOptions")
            .field("config", &self.config)
            .field("tls", &self.settings)
            .finish()
    }
}

impl PgConnectOptions {
    /// Reads `conninfo` (a `postgres://` or `postgresql://` URL, or libpq's `key=value`
    /// form) and loads the certificate files it names. A missing file, an unknown
    /// parameter or a bad value is an [`Error::InvalidInput`] that names it; nothing
    /// connects yet. Without the `tls` feature, `sslmode=disable|allow|prefer` connect in
    /// plaintext and a string that needs TLS (`sslmode=require` and up, `sslrootcert`,
    /// `sslcert`, `sslkey`) is refused here, saying so. `application_name` defaults to `hopper` and `connect_timeout` to 5 s,
    /// which bounds each host's whole attempt (startup and TLS included), as in libpq.
    pub fn parse(conninfo: &str) -> Result<Self> {
        let invalid = |e: String| Error::InvalidInput(format!("database URL: {e}"));
        let (rest, params) = conninfo::split(conninfo).map_err(invalid)?;
        let settings = TlsSettings::resolve(&params).map_err(invalid)?;
        let mut config: Config = rest
            .parse()
            .map_err(|e| Error::InvalidInput(format!("database URL: {}", chain(&e))))?;
        config.ssl_mode(settings.mode.driver_mode());
        if config.get_application_name().is_none() {
            config.application_name("hopper");
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(DEFAULT_CONNECT_TIMEOUT);
        }
        let tls = settings.connector().map_err(invalid)?;
        Ok(PgConnectOptions {
            config,
            settings: Arc::new(settings),
            tls,
        })
    }

    /// The driver's configuration (hosts, user, database, …).
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The driver's configuration, to change before connecting.
    pub fn config_mut(&mut self) -> &mut Config {
        &mut self.config
    }

    /// The TLS connector, for the driver's own `connect` or a pool of another kind.
    pub fn tls(&self) -> PgTls {
        self.tls.clone()
    }

    /// The `sslmode` in force, as libpq names it (`prefer` when the string gave none;
    /// always `disable` without the `tls` feature).
    pub fn ssl_mode(&self) -> &'static str {
        self.settings.mode.name()
    }

    /// Opens one connection and returns the client and its connection, which the caller
    /// drives (as tokio-postgres's own `connect` does). A failure says why in one
    /// sentence (for TLS: wrong CA, wrong host name, …).
    pub async fn connect_raw(&self) -> Result<(Client, Connection<Socket, PgTlsStream>)> {
        let bound = self.attempt_bound();
        tokio::time::timeout(bound, self.config.connect(self.tls.clone()))
            .await
            .map_err(|_| Error::database(NoAnswer { within: bound }))?
            .map_err(|e| self.connect_error(e))
    }

    /// The longest one connection may take to be made, startup and TLS included: the
    /// `connect_timeout` once per host, as libpq counts it. tokio-postgres's own
    /// `connect_timeout` bounds only each host's TCP connect, so a server that accepted
    /// and then never answered (a hung process, a proxy with no server behind it) held the
    /// caller for ever.
    fn attempt_bound(&self) -> Duration {
        let per_host = self
            .config
            .get_connect_timeout()
            .copied()
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        let hosts = u32::try_from(self.config.get_hosts().len().max(1)).unwrap_or(u32::MAX);
        per_host.saturating_mul(hosts)
    }

    /// Opens one connection, driven by a spawned task until the client is dropped.
    pub async fn connect(&self) -> Result<Client> {
        let (client, connection) = self.connect_raw().await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "PostgreSQL connection closed");
            }
        });
        Ok(client)
    }

    /// A pool of at most `size` connections. Nothing connects until the first `get`. A
    /// connection that broke (the server went away, a failover) is found broken when it
    /// is next taken and replaced by a fresh one, which goes through the host list again;
    /// so is every connection made before one answered that the server takes no writes
    /// (SQLSTATE 25006: a standby, see `read_only.rs`).
    pub fn pool(&self, size: usize) -> Result<Pool> {
        self.pool_with_setup(size, None)
    }

    /// [`PgConnectOptions::pool`], each connection running `setup` (session settings) once
    /// it is made, before its first use.
    pub(crate) fn pool_with_setup(&self, size: usize, setup: Option<String>) -> Result<Pool> {
        let manager = Manager::from_config(
            self.config.clone(),
            self.tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let mut builder = Pool::builder(manager)
            .max_size(size.max(1))
            .create_timeout(Some(self.attempt_bound()))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .pre_recycle(Hook::sync_fn(|_, metrics| {
                if crate::read_only::made_before_refusal(metrics.created) {
                    Err(HookError::message(
                        "made before a connection said the server takes no writes",
                    ))
                } else {
                    Ok(())
                }
            }));
        if let Some(setup) = setup {
            let setup = std::sync::Arc::new(setup);
            builder = builder.post_create(Hook::async_fn(move |client, _| {
                let setup = setup.clone();
                Box::pin(async move {
                    client
                        .batch_execute(&setup)
                        .await
                        .map_err(HookError::Backend)
                })
            }));
        }
        builder.build().map_err(Error::database)
    }

    /// Turns a failure to connect into hopper's error ([`Error::Database`], which says
    /// the call may succeed later), its message the whole reason: the server's own words
    /// (`FATAL: …`), or a sentence when TLS is the cause.
    pub fn connect_error(&self, e: tokio_postgres::Error) -> Error {
        let why = tls::explain(&e, &self.settings).unwrap_or_else(|| chain(&e));
        Error::database(ConnectError { why, driver: e })
    }

    /// [`PgConnectOptions::connect_error`] for a pool's error.
    pub fn pool_error(&self, e: deadpool_postgres::PoolError) -> Error {
        match e {
            deadpool_postgres::PoolError::Backend(e) => self.connect_error(e),
            deadpool_postgres::PoolError::Timeout(deadpool_postgres::TimeoutType::Create) => {
                Error::database(NoAnswer {
                    within: self.attempt_bound(),
                })
            }
            other => Error::database(other),
        }
    }
}

/// How long a connection attempt waits per host when the string sets no `connect_timeout`.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection the server accepted but did not complete within the bound.
#[derive(Debug, thiserror::Error)]
#[error(
    "could not connect to PostgreSQL: no answer within {within:?} (the server accepted the \
     connection and then said nothing: a hung server, or a proxy with no server behind it)"
)]
pub struct NoAnswer {
    within: Duration,
}

/// A connection that failed, with the whole reason in its message (so the driver's error,
/// whose causes the message already spells out, is not its `source`).
#[derive(Debug, thiserror::Error)]
#[error("could not connect to PostgreSQL: {why}")]
pub struct ConnectError {
    why: String,
    driver: tokio_postgres::Error,
}

impl ConnectError {
    /// The driver's error (for its SQLSTATE, `as_db_error`, …).
    pub fn driver_error(&self) -> &tokio_postgres::Error {
        &self.driver
    }
}

/// An error and its causes on one line (the driver's own message stops at the first).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}
