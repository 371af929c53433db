//! [`PgBouncer`]: a real PgBouncer in transaction mode in front of the test database,
//! started as a child process on a free port and stopped when dropped, to test code that
//! runs behind one (`Pooler::Transaction`, `docs/deployment.md`).
//!
//! It needs the `pgbouncer` program (Debian: `apt-get install pgbouncer`; found at
//! `/usr/sbin/pgbouncer`, on the `PATH`, or at `HOPPER_PGBOUNCER`). PgBouncer refuses to run
//! as root, so as root it is started with `-u postgres`. The upstream is the host, port,
//! user and database of [`database_url`], which must accept the user without a password
//! or with the password in the URL.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use hopper_core::{Error, Result};
use tokio_postgres::config::Host;

use super::database_url;

/// How long PgBouncer may take to say it is up.
const STARTUP: Duration = Duration::from_secs(10);

/// How the [`PgBouncer`] pools (the defaults suit most tests; the `with_*` methods change
/// them). `#[non_exhaustive]`, so a new setting is not a breaking change.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PgBouncerConfig {
    /// Server connections per database and user (`default_pool_size`, default 4).
    pub pool_size: u32,
    /// Runs `DISCARD ALL` on a server connection after every transaction
    /// (`server_reset_query_always`), so nothing a client leaves in a session (a prepared
    /// statement, a setting, a lock, a LISTEN) survives into the next transaction: what
    /// relies on session state fails at once instead of now and then (default false).
    pub discard_all: bool,
}

impl Default for PgBouncerConfig {
    fn default() -> Self {
        PgBouncerConfig {
            pool_size: 4,
            discard_all: false,
        }
    }
}

impl PgBouncerConfig {
    /// With `pool_size` server connections per database and user.
    pub fn with_pool_size(self, pool_size: u32) -> Self {
        PgBouncerConfig { pool_size, ..self }
    }

    /// With (or without) `DISCARD ALL` after every transaction.
    pub fn with_discard_all(self, discard_all: bool) -> Self {
        PgBouncerConfig {
            discard_all,
            ..self
        }
    }
}

/// A PgBouncer in transaction mode in front of the test database (see the module docs),
/// stopped and its files removed on drop.
#[derive(Debug)]
pub struct PgBouncer {
    child: Child,
    dir: PathBuf,
    url: String,
    /// PgBouncer's admin console (the database `pgbouncer`).
    admin_url: String,
}

impl PgBouncer {
    /// Starts one with the default [`PgBouncerConfig`].
    pub fn start() -> Result<Self> {
        Self::start_with(&PgBouncerConfig::default())
    }

    /// Starts one with `config`, in front of [`database_url`]. Returns once PgBouncer
    /// accepts connections.
    pub fn start_with(config: &PgBouncerConfig) -> Result<Self> {
        let upstream: tokio_postgres::Config = database_url()
            .parse()
            .map_err(|e| Error::InvalidInput(format!("test database URL: {e}")))?;
        // A port found free may be taken before PgBouncer binds it: try a few.
        let mut last = String::new();
        for _ in 0..5 {
            match start_once(&upstream, config) {
                Ok(bouncer) => return Ok(bouncer),
                Err(e) => last = e.to_string(),
            }
        }
        Err(Error::Database(
            format!("starting pgbouncer: {last}").into(),
        ))
    }

    /// The URL of the test database through this PgBouncer.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Runs `command` on PgBouncer's admin console, for a test that changes what stands
    /// behind the pooler: `RECONNECT` (each server connection is closed once its client
    /// lets it go, so the next transaction runs on a new server session), `PAUSE`,
    /// `RESUME`.
    pub async fn admin(&self, command: &str) -> Result<()> {
        let fail = |e: tokio_postgres::Error| {
            Error::Database(format!("pgbouncer admin {command:?}: {e}").into())
        };
        let (client, connection) = tokio_postgres::connect(&self.admin_url, tokio_postgres::NoTls)
            .await
            .map_err(fail)?;
        let connection = tokio::spawn(connection);
        let done = client.simple_query(command).await.map_err(fail);
        drop(client);
        let _ = connection.await;
        done.map(drop)
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One attempt: a free port, the files, the process, its "process up" line.
fn start_once(upstream: &tokio_postgres::Config, config: &PgBouncerConfig) -> Result<PgBouncer> {
    let fail =
        |what: &str, e: std::io::Error| Error::Database(format!("pgbouncer: {what}: {e}").into());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| fail("finding a free port", e))?
        .port();
    let dir = std::env::temp_dir().join(format!("hopper-pgbouncer-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(&dir).map_err(|e| fail("creating its directory", e))?;
    let files = write_files(&dir, upstream, config, port);
    let started = files.and_then(|ini| spawn(&ini));
    let child = match started {
        Ok(child) => child,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e);
        }
    };
    let user = upstream.get_user().unwrap_or("postgres");
    let password = upstream
        .get_password()
        .map(|p| format!(":{}", String::from_utf8_lossy(p)))
        .unwrap_or_default();
    let dbname = upstream.get_dbname().unwrap_or(user);
    Ok(PgBouncer {
        child,
        dir,
        url: format!("postgres://{user}{password}@127.0.0.1:{port}/{dbname}"),
        admin_url: format!("postgres://{user}{password}@127.0.0.1:{port}/pgbouncer"),
    })
}

/// Writes `pgbouncer.ini` and its user list into `dir` (readable by the user PgBouncer
/// switches to) and returns the ini's path.
fn write_files(
    dir: &Path,
    upstream: &tokio_postgres::Config,
    config: &PgBouncerConfig,
    port: u16,
) -> Result<PathBuf> {
    let host = match upstream.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        Some(Host::Unix(path)) => path.display().to_string(),
        None => "127.0.0.1".to_owned(),
    };
    let upstream_port = upstream.get_ports().first().copied().unwrap_or(5432);
    let user = upstream.get_user().unwrap_or("postgres");
    let password = upstream
        .get_password()
        .map(|p| format!(" password={}", String::from_utf8_lossy(p)))
        .unwrap_or_default();
    let reset = if config.discard_all {
        "server_reset_query = DISCARD ALL\nserver_reset_query_always = 1\n"
    } else {
        ""
    };
    let users = dir.join("userlist.txt");
    let ini = dir.join("pgbouncer.ini");
    let text = format!(
        "[databases]\n\
         * = host={host} port={upstream_port}{password}\n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {port}\n\
         unix_socket_dir =\n\
         auth_type = trust\n\
         auth_file = {users}\n\
         admin_users = {user}\n\
         pool_mode = transaction\n\
         default_pool_size = {pool_size}\n\
         max_client_conn = 500\n\
         ignore_startup_parameters = extra_float_digits\n\
         {reset}",
        users = users.display(),
        pool_size = config.pool_size.max(1),
    );
    let write = |path: &Path, text: &str| {
        std::fs::write(path, text).map_err(|e| {
            Error::Database(format!("pgbouncer: writing {}: {e}", path.display()).into())
        })
    };
    write(&users, &format!("\"{user}\" \"\"\n"))?;
    write(&ini, &text)?;
    readable_by_all(dir)?;
    Ok(ini)
}

/// Lets the user PgBouncer runs as (not root) read its directory.
fn readable_by_all(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| Error::Database(format!("pgbouncer: {}: {e}", dir.display()).into()))
}

/// Starts PgBouncer on `ini` and waits for its "process up" line, keeping its log drained.
fn spawn(ini: &Path) -> Result<Child> {
    let mut command = Command::new(program());
    if running_as_root() {
        command.args(["-u", "postgres"]);
    }
    let mut child = command
        .arg(ini)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            Error::Database(format!(
                "pgbouncer: cannot run {} ({e}); install it (Debian: apt-get install pgbouncer) or set HOPPER_PGBOUNCER",
                program().display()
            ).into())
        })?;
    let Some(stderr) = child.stderr.take() else {
        let _ = child.kill();
        return Err(Error::Database("pgbouncer: no log pipe".into()));
    };
    let (up_tx, up_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut up_tx = Some(up_tx);
        let mut log = Vec::new();
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line.contains("process up") {
                if let Some(tx) = up_tx.take() {
                    let _ = tx.send(Ok(()));
                }
            } else if up_tx.is_some() {
                log.push(line);
            }
        }
        // The log ended before PgBouncer was up: it exited.
        if let Some(tx) = up_tx.take() {
            let _ = tx.send(Err(log.join("\n")));
        }
    });
    match up_rx.recv_timeout(STARTUP) {
        Ok(Ok(())) => Ok(child),
        Ok(Err(log)) => {
            let _ = child.wait();
            Err(Error::Database(format!("pgbouncer exited: {log}").into()))
        }
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(Error::Database(
                format!("pgbouncer did not start within {STARTUP:?}").into(),
            ))
        }
    }
}

/// `HOPPER_PGBOUNCER`, else Debian's `/usr/sbin/pgbouncer` if present, else `pgbouncer` on
/// the `PATH`.
fn program() -> PathBuf {
    if let Some(path) = std::env::var_os("HOPPER_PGBOUNCER") {
        return PathBuf::from(path);
    }
    let debian = Path::new("/usr/sbin/pgbouncer");
    if debian.exists() {
        debian.to_path_buf()
    } else {
        PathBuf::from("pgbouncer")
    }
}

/// True when this process runs as root (uid 0), which PgBouncer refuses to run as.
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().nth(1))
            == Some("0")
    })
}
