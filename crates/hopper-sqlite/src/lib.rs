#![doc = include_str!("../README.md")]

mod backend;
mod capabilities;
mod error;
mod functions;
mod liveness;
mod migrate;
mod minute_stats;
mod outcome;
mod poison;
mod pool;
mod query;
mod rows;
mod scheduling;
pub mod sql;
mod wake;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use hopper_core::{Clock, Error, Result, SystemClock, Wakeup};
use tokio::sync::broadcast;

pub use error::map_sqlite;
pub use liveness::lock_file;
pub use pool::Location;
use pool::{Pool, Settings};
use sql::Queries;

/// How SQLite makes a commit durable (`PRAGMA synchronous`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Synchronous {
    /// Every commit is on disk before it returns, like PostgreSQL's defaults: a power cut
    /// loses nothing acknowledged. The default.
    #[default]
    Full,
    /// Commits survive a crash of the process but the last ones may be lost on a power
    /// cut or OS crash (the database stays consistent). Faster: no fsync per commit.
    Normal,
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

/// How to open the database, and how to name hopper's tables in it. Built from
/// [`SqliteOptions::default`] with the `with_*` methods (or by setting its fields);
/// `#[non_exhaustive]`, so a new option is not a breaking change.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// The prefix of hopper's tables (default `hopper`: `hopper_jobs`, `hopper_nodes`, …).
    /// SQLite has no schemas, so this is how two hopper instances share one file.
    pub prefix: String,
    /// Reader connections at most, opened on demand (default 4). There is always exactly
    /// one writer connection.
    pub readers: usize,
    /// How long a statement waits for another process's lock before failing with a
    /// (transient) database error (default 5 s).
    pub busy_timeout: Duration,
    /// Durability of commits (default [`Synchronous::Full`]).
    pub synchronous: Synchronous,
    /// The clock for every "now" (default: this machine's clock; SQLite has no server
    /// clock of its own).
    pub clock: Arc<dyn Clock>,
    /// Whether opening a file that does not exist creates it (default `true`). With
    /// `false`, a missing file is an [`Error::NotFound`] that names it, and nothing is
    /// created: what a tool wants for the commands that need a database migrated before
    /// (a mistyped path would otherwise leave an empty file behind).
    pub create_if_missing: bool,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            prefix: "hopper".to_owned(),
            readers: 4,
            busy_timeout: Duration::from_secs(5),
            synchronous: Synchronous::Full,
            clock: Arc::new(SystemClock),
            create_if_missing: true,
        }
    }
}

impl SqliteOptions {
    /// With hopper's tables named `<prefix>_jobs`, `<prefix>_nodes`, ….
    pub fn with_prefix(self, prefix: impl Into<String>) -> Self {
        SqliteOptions {
            prefix: prefix.into(),
            ..self
        }
    }

    /// With at most `readers` reader connections.
    pub fn with_readers(self, readers: usize) -> Self {
        SqliteOptions { readers, ..self }
    }

    /// With statements waiting this long for another process's lock.
    pub fn with_busy_timeout(self, busy_timeout: Duration) -> Self {
        SqliteOptions {
            busy_timeout,
            ..self
        }
    }

    /// With this durability of commits.
    pub fn with_synchronous(self, synchronous: Synchronous) -> Self {
        SqliteOptions {
            synchronous,
            ..self
        }
    }

    /// With `clock` for every "now" (tests: a [`hopper_core::TestClock`]).
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        SqliteOptions { clock, ..self }
    }

    /// Creating a missing file on open (`true`, the default), or refusing it with
    /// [`Error::NotFound`] and creating nothing (`false`).
    pub fn with_create_if_missing(self, create_if_missing: bool) -> Self {
        SqliteOptions {
            create_if_missing,
            ..self
        }
    }
}

/// The SQLite backend. Cheap to clone; clones share the connections and the wake-up
/// channel.
#[derive(Debug, Clone)]
pub struct SqliteBackend {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pool: Pool,
    prefix: String,
    queries: Queries,
    clock: Arc<dyn Clock>,
    wake: broadcast::Sender<Wakeup>,
    /// Per grouped queue, the group this backend's claims served last: where the next
    /// claim's round-robin starts.
    cursors: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl Inner {
    fn cursor(&self, queue: &str) -> Option<String> {
        let cursors = self.cursors.lock().unwrap_or_else(|e| e.into_inner());
        cursors.get(queue).cloned()
    }

    fn set_cursor(&self, queue: &str, cursor: Option<String>) {
        let mut cursors = self.cursors.lock().unwrap_or_else(|e| e.into_inner());
        match cursor {
            Some(group) => cursors.insert(queue.to_owned(), group),
            None => cursors.remove(queue),
        };
    }
}

/// Reads a SQLite URL: `sqlite://relative/path.db`, `sqlite:///absolute/path.db`,
/// `sqlite:path.db`, or `sqlite::memory:` (also `sqlite://:memory:`) for a private
/// in-memory database.
pub fn parse_url(url: &str) -> Result<Location> {
    let rest = url.strip_prefix("sqlite:").ok_or_else(|| {
        Error::InvalidInput(format!(
            "{url:?} is not a SQLite URL: expected sqlite://path or sqlite::memory:"
        ))
    })?;
    let path = rest.strip_prefix("//").unwrap_or(rest);
    if path.contains('?') {
        return Err(Error::InvalidInput(format!(
            "SQLite URL {url:?}: options after '?' are not supported; set them in SqliteOptions"
        )));
    }
    match path {
        ":memory:" => Ok(Location::Memory),
        "" => Err(Error::InvalidInput(format!(
            "SQLite URL {url:?} names no file: expected sqlite://path or sqlite::memory:"
        ))),
        path => Ok(Location::File(PathBuf::from(path))),
    }
}

impl SqliteBackend {
    /// Opens the database named by a SQLite URL (see [`parse_url`]).
    pub async fn connect(url: &str, options: SqliteOptions) -> Result<Self> {
        Self::open_location(parse_url(url)?, options).await
    }

    /// Opens the database file at `path`, in WAL mode; creates it if missing unless
    /// [`SqliteOptions::create_if_missing`] says not to.
    pub async fn open(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self> {
        Self::open_location(Location::File(path.as_ref().to_owned()), options).await
    }

    /// A private in-memory database, gone when the last clone of the backend is dropped.
    /// For tests and demos: nothing survives the process, and no other process can see it.
    pub async fn open_in_memory(options: SqliteOptions) -> Result<Self> {
        Self::open_location(Location::Memory, options).await
    }

    /// Opens the database at `location`.
    pub async fn open_location(location: Location, options: SqliteOptions) -> Result<Self> {
        hopper_core::policy::validate_sql_name("table prefix", &options.prefix)?;
        let settings = Settings {
            busy_timeout: options.busy_timeout,
            synchronous: options.synchronous.pragma(),
            readers: options.readers,
            create_if_missing: options.create_if_missing,
        };
        let pool = Pool::open(location, settings).await?;
        Ok(SqliteBackend {
            inner: Arc::new(Inner {
                pool,
                queries: Queries::new(&options.prefix),
                prefix: options.prefix,
                clock: options.clock,
                wake: wake::channel(),
                cursors: Default::default(),
            }),
        })
    }

    /// Where the database lives.
    pub fn location(&self) -> &Location {
        self.inner.pool.location()
    }

    /// The prefix of hopper's tables.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// "Now", from the clock, at the precision the database stores.
    fn now(&self) -> DateTime<Utc> {
        rows::truncate(self.inner.clock.now().unwrap_or_else(Utc::now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_files_or_memory() -> Result<()> {
        assert_eq!(parse_url("sqlite::memory:")?, Location::Memory);
        assert_eq!(parse_url("sqlite://:memory:")?, Location::Memory);
        assert_eq!(
            parse_url("sqlite://hopper.db")?,
            Location::File("hopper.db".into())
        );
        assert_eq!(
            parse_url("sqlite:///var/lib/hopper.db")?,
            Location::File("/var/lib/hopper.db".into())
        );
        assert_eq!(parse_url("sqlite:a/b.db")?, Location::File("a/b.db".into()));
        for bad in [
            "postgres://x",
            "sqlite://",
            "sqlite:",
            "sqlite://x.db?mode=rwc",
        ] {
            assert!(parse_url(bad).is_err(), "{bad:?} accepted");
        }
        Ok(())
    }
}
