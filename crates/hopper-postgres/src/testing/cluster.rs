//! A private PostgreSQL cluster for one test: `initdb` into a temporary directory, a free
//! port on 127.0.0.1, its own configuration (TLS with the test's certificates, `pg_hba`
//! rules, replication), stopped and removed when dropped.
//!
//! For what the machine's shared server cannot be bent to: certificates of the test's own
//! CA, client-certificate authentication, a primary and a standby to fail over between.
//! The binaries come from `HOPPER_PG_BIN` or the newest `/usr/lib/postgresql/*/bin`. As
//! `initdb` refuses to run as root, a root process runs them as the `postgres` user.

use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// What went wrong setting up or driving a cluster.
pub type ClusterError = String;

/// How [`TestCluster::stop`] shuts the server down (`pg_ctl stop -m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// Waits for sessions to end after ending them: a clean shutdown.
    Fast,
    /// Kills the server at once, as a crash would: recovery runs at the next start.
    Immediate,
}

/// A private PostgreSQL cluster (see the module docs).
#[derive(Debug)]
pub struct TestCluster {
    bin: PathBuf,
    /// The temporary directory holding the data directory, the log and the socket.
    root: PathBuf,
    port: u16,
    /// The user that runs the server's programs when this process is root.
    run_as: Option<String>,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl TestCluster {
    /// Where the PostgreSQL programs are, or `None` when this machine has none.
    pub fn bin_dir() -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("HOPPER_PG_BIN") {
            return Some(PathBuf::from(dir));
        }
        let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let version = entry.file_name().to_str()?.parse().ok()?;
                let bin = entry.path().join("bin");
                bin.join("initdb").exists().then_some((version, bin))
            })
            .collect();
        found.sort();
        found.pop().map(|(_, bin)| bin)
    }

    /// Creates a cluster (`initdb`, superuser `postgres`, trust authentication on
    /// 127.0.0.1 and the socket) on a free port. Not started: add configuration, then
    /// [`TestCluster::start`].
    pub fn init() -> Result<Self, ClusterError> {
        let cluster = Self::empty()?;
        cluster.run(
            "initdb",
            &[
                "-D",
                &cluster.data_str(),
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "--no-instructions",
            ],
        )?;
        cluster.append_conf(&[
            // Tests are not crash tests of the disk: the OS keeps what a killed server wrote.
            "fsync = off",
            "max_connections = 100",
            "shared_buffers = 32MB",
            "wal_level = replica",
            "max_wal_senders = 4",
        ])?;
        cluster.write_hba(&[
            "local all all trust",
            "host all all 127.0.0.1/32 trust",
            "local replication all trust",
            "host replication all 127.0.0.1/32 trust",
        ])?;
        Ok(cluster)
    }

    /// Creates a streaming standby of the running `primary` (`pg_basebackup -R`), with its
    /// own port and `application_name` (its name in `synchronous_standby_names`). The copy
    /// starts from a fast checkpoint: the default spreads the checkpoint's writes over
    /// `checkpoint_completion_target`, seconds of waiting for a cluster this small.
    pub fn standby_of(primary: &TestCluster, application_name: &str) -> Result<Self, ClusterError> {
        let cluster = Self::empty()?;
        cluster.run(
            "pg_basebackup",
            &[
                "-D",
                &cluster.data_str(),
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "postgres",
                "-X",
                "stream",
                "-R",
                "--checkpoint=fast",
                "--no-sync",
            ],
        )?;
        // `-R` wrote a primary_conninfo into postgresql.auto.conf, read after
        // postgresql.conf: this one, with the standby's name, goes after it.
        cluster.append_to(
            "postgresql.auto.conf",
            &[&format!(
                "primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name={application_name}'",
                primary.port
            )],
        )?;
        // The primary's synchronous_standby_names came with the copy: promoted, this
        // cluster has no standby of its own, and waiting for one would hang every commit.
        cluster.append_conf(&["synchronous_standby_names = ''"])?;
        Ok(cluster)
    }

    /// A started primary with hopper's schema, and its started streaming standby (copied
    /// after the migration, so it has the schema too), named `application_name`.
    pub async fn migrated_with_standby(
        application_name: &str,
    ) -> Result<(Self, Self), Box<dyn std::error::Error + Send + Sync>> {
        let primary = Self::init()?;
        primary.start()?;
        let url = primary.url("sslmode=disable");
        use hopper_core::Backend;
        crate::PgBackend::connect(&url, crate::PgOptions::default())
            .await?
            .migrate()
            .await?;
        let standby = Self::standby_of(&primary, application_name)?;
        standby.start()?;
        Ok((primary, standby))
    }

    /// A fresh directory and port, and the user to run the programs as.
    fn empty() -> Result<Self, ClusterError> {
        let bin = Self::bin_dir()
            .ok_or("no PostgreSQL programs: install postgresql or set HOPPER_PG_BIN")?;
        let root = std::env::temp_dir().join(format!(
            "hopper-cluster-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        if root.exists() {
            std::fs::remove_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
        }
        std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
        let run_as = is_root().then(|| "postgres".to_owned());
        let cluster = TestCluster {
            bin,
            root,
            port: free_port()?,
            run_as,
        };
        cluster.give(&cluster.root)?;
        std::fs::set_permissions(&cluster.root, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("{}: {e}", cluster.root.display()))?;
        Ok(cluster)
    }

    /// The port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A directory removed with the cluster, where a test can keep files of its own
    /// (client certificates, …).
    pub fn dir(&self) -> &Path {
        &self.root
    }

    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.root.join("data")
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`, with `params` as its query string
    /// (e.g. `sslmode=verify-full&sslrootcert=/…`) when not empty.
    pub fn url(&self, params: &str) -> String {
        let base = format!("postgres://postgres@127.0.0.1:{}/postgres", self.port);
        if params.is_empty() {
            base
        } else {
            format!("{base}?{params}")
        }
    }

    fn data_str(&self) -> String {
        self.data_dir().display().to_string()
    }

    /// Appends lines to `postgresql.conf` (the port, the listen address and the socket
    /// directory are this cluster's already). Takes effect at the next start or reload.
    pub fn append_conf(&self, lines: &[&str]) -> Result<(), ClusterError> {
        let own = [
            format!("port = {}", self.port),
            "listen_addresses = '127.0.0.1'".to_owned(),
            format!("unix_socket_directories = '{}'", self.root.display()),
        ];
        let all: Vec<&str> = own
            .iter()
            .map(String::as_str)
            .chain(lines.iter().copied())
            .collect();
        self.append_to("postgresql.conf", &all)
    }

    /// Appends lines to a file of the data directory.
    fn append_to(&self, name: &str, lines: &[&str]) -> Result<(), ClusterError> {
        let path = self.data_dir().join(name);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        for line in lines {
            writeln!(file, "{line}").map_err(|e| format!("{}: {e}", path.display()))?;
        }
        Ok(())
    }

    /// Replaces `pg_hba.conf` with `lines`. Takes effect at the next start or reload.
    pub fn write_hba(&self, lines: &[&str]) -> Result<(), ClusterError> {
        self.write_file("pg_hba.conf", &lines.join("\n"), 0o600)?;
        Ok(())
    }

    /// Turns TLS on with a server certificate chain and key (PEM), and `client_ca` (PEM)
    /// as the CA that client certificates must come from, if given.
    pub fn enable_tls(
        &self,
        cert_pem: &str,
        key_pem: &str,
        client_ca_pem: Option<&str>,
    ) -> Result<(), ClusterError> {
        let cert = self.write_file("server.crt", cert_pem, 0o644)?;
        let key = self.write_file("server.key", key_pem, 0o600)?;
        let mut lines = vec![
            "ssl = on".to_owned(),
            format!("ssl_cert_file = '{}'", cert.display()),
            format!("ssl_key_file = '{}'", key.display()),
        ];
        if let Some(ca) = client_ca_pem {
            let ca = self.write_file("client_ca.crt", ca, 0o644)?;
            lines.push(format!("ssl_ca_file = '{}'", ca.display()));
        }
        let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
        self.append_conf(&lines)
    }

    /// Writes a file in the data directory, owned by the server's user, with `mode`.
    fn write_file(&self, name: &str, text: &str, mode: u32) -> Result<PathBuf, ClusterError> {
        let path = self.data_dir().join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        self.give(&path)?;
        Ok(path)
    }

    /// Starts the server and waits until it accepts connections (`pg_ctl start -w`).
    pub fn start(&self) -> Result<(), ClusterError> {
        let log = self.root.join("server.log");
        self.pg_ctl(&["start", "-w", "-t", "60", "-l", &log.display().to_string()])
            .map_err(|e| format!("{e}\n{}", self.log_tail()))
    }

    /// Stops the server.
    pub fn stop(&self, mode: StopMode) -> Result<(), ClusterError> {
        let mode = match mode {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        };
        self.pg_ctl(&["stop", "-w", "-m", mode])
    }

    /// Re-reads the configuration files (`pg_ctl reload`).
    pub fn reload(&self) -> Result<(), ClusterError> {
        self.pg_ctl(&["reload"])
    }

    /// Promotes a standby to primary and waits until it accepts writes (`pg_ctl promote -w`).
    pub fn promote(&self) -> Result<(), ClusterError> {
        self.pg_ctl(&["promote", "-w", "-t", "60"])
    }

    /// The last lines of the server's log, for an error message.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.root.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<(), ClusterError> {
        let mut all = vec!["-D".to_owned(), self.data_str()];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        self.run("pg_ctl", &all)
    }

    /// Runs one of the server's programs (as the server's user when this process is root).
    fn run(&self, program: &str, args: &[&str]) -> Result<(), ClusterError> {
        let path = self.bin.join(program);
        let mut command = match &self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(&path);
                c
            }
            None => Command::new(&path),
        };
        let output = command
            .args(args)
            .current_dir(&self.root)
            .output()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{program} {}: {}\n{}{}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    }

    /// Hands `path` to the server's user (when this process is root).
    fn give(&self, path: &Path) -> Result<(), ClusterError> {
        let Some(user) = &self.run_as else {
            return Ok(());
        };
        let status = Command::new("chown")
            .arg(user)
            .arg(path)
            .status()
            .map_err(|e| format!("chown: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("chown {user} {}: {status}", path.display()))
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if self.data_dir().join("postmaster.pid").exists() {
            let _ = self.stop(StopMode::Immediate);
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Whether this process runs as root (it owns what it creates).
fn is_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// A port on 127.0.0.1 that nothing listens on now.
fn free_port() -> Result<u16, ClusterError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("a free port: {e}"))?;
    listener
        .local_addr()
        .map(|addr| addr.port())
        .map_err(|e| format!("a free port: {e}"))
}
