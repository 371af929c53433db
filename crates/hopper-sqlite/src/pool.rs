//! Connections, and running blocking SQLite calls off the async threads.
//!
//! rusqlite is synchronous, so every call runs on tokio's blocking pool
//! (`spawn_blocking`), holding a connection for the duration of one closure:
//!
//! - **one writer connection**, behind an async mutex. SQLite allows one writer at a time
//!   anyway; queueing this process's writers on a mutex (in FIFO order, without
//!   sleeping) is much cheaper than letting several connections fight over the file lock
//!   through `busy_timeout`'s sleep-and-retry. Every write is a `BEGIN IMMEDIATE`
//!   transaction: it takes the file's write lock before reading, so a read-then-write
//!   (a claim) can never interleave with another process's, and a busy database is waited
//!   for (`busy_timeout`) instead of failing midway.
//! - **a few reader connections**, opened on demand. In WAL mode readers see the last
//!   committed state and neither block nor are blocked by the writer, so admin queries
//!   (`job_list`, `queue_stats`) never delay claims.
//!
//! An in-memory database exists only inside its one connection, so there the writer
//! serves reads too.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hopper_core::{Error, Result};
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};
use tokio::sync::Semaphore;

use crate::error::{is_busy, map_sqlite};

/// Where the database lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A file (created if missing, unless `SqliteOptions::create_if_missing` is off).
    File(PathBuf),
    /// Memory private to one backend, gone when it is dropped.
    Memory,
}

/// How connections are set up.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub busy_timeout: Duration,
    pub synchronous: &'static str,
    pub readers: usize,
    pub create_if_missing: bool,
}

/// The writer and the readers of one database.
#[derive(Debug, Clone)]
pub(crate) struct Pool {
    inner: Arc<PoolInner>,
}

#[derive(Debug)]
struct PoolInner {
    location: Location,
    settings: Settings,
    writer: Arc<tokio::sync::Mutex<Connection>>,
    readers: Mutex<Vec<Connection>>,
    reader_slots: Arc<Semaphore>,
}

impl Pool {
    /// Opens the writer connection (creating the file if missing and allowed to, switching
    /// it to WAL).
    pub async fn open(location: Location, settings: Settings) -> Result<Self> {
        let (writer, location, settings) = tokio::task::spawn_blocking(move || {
            open(&location, &settings, false).map(|c| (c, location, settings))
        })
        .await
        .map_err(Error::database)??;
        let readers = match location {
            Location::File(_) => settings.readers.max(1),
            Location::Memory => 0,
        };
        Ok(Pool {
            inner: Arc::new(PoolInner {
                location,
                settings,
                writer: Arc::new(tokio::sync::Mutex::new(writer)),
                readers: Mutex::new(Vec::new()),
                reader_slots: Arc::new(Semaphore::new(readers)),
            }),
        })
    }

    /// Where the database lives.
    pub fn location(&self) -> &Location {
        &self.inner.location
    }

    /// Runs `f` on the writer connection, outside any transaction.
    pub async fn write<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let mut writer = self.inner.writer.clone().lock_owned().await;
        tokio::task::spawn_blocking(move || f(&mut writer))
            .await
            .map_err(Error::database)?
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction on the writer connection, committed
    /// if `f` succeeds and rolled back otherwise.
    pub async fn write_tx<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&Transaction<'_>) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        self.write(move |conn| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(map_sqlite)?;
            let out = f(&tx)?;
            tx.commit().map_err(map_sqlite)?;
            Ok(out)
        })
        .await
    }

    /// Runs `f` on a reader connection (the writer, for an in-memory database).
    pub async fn read<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        if self.inner.location == Location::Memory {
            return self.write(move |conn| f(conn)).await;
        }
        let permit = self
            .inner
            .reader_slots
            .clone()
            .acquire_owned()
            .await
            .map_err(Error::database)?;
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let pooled = inner.idle_readers().pop();
            let conn = match pooled {
                Some(conn) => conn,
                None => open(&inner.location, &inner.settings, true)?,
            };
            let out = f(&conn);
            inner.idle_readers().push(conn);
            out
        })
        .await
        .map_err(Error::database)?
    }
}

impl PoolInner {
    fn idle_readers(&self) -> std::sync::MutexGuard<'_, Vec<Connection>> {
        self.readers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Opens and sets up one connection.
fn open(location: &Location, settings: &Settings, reader: bool) -> Result<Connection> {
    let conn = match location {
        Location::File(path) => {
            let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
            if settings.create_if_missing {
                flags |= OpenFlags::SQLITE_OPEN_CREATE;
            }
            Connection::open_with_flags(path, flags).map_err(|e| {
                // Without the create flag, SQLite answers a missing file with "unable to
                // open": say what is missing instead, and that nothing was created.
                if !settings.create_if_missing && matches!(path.try_exists(), Ok(false)) {
                    return Error::NotFound(format!(
                        "SQLite database file {} does not exist (nothing was created); \
                         check the path, or create it with `hopper migrate`",
                        path.display()
                    ));
                }
                Error::database(std::io::Error::other(format!(
                    "opening SQLite database {}: {e}",
                    path.display()
                )))
            })?
        }
        Location::Memory => Connection::open_in_memory().map_err(map_sqlite)?,
    };
    conn.busy_timeout(settings.busy_timeout)
        .map_err(map_sqlite)?;
    conn.set_prepared_statement_cache_capacity(32);
    crate::functions::register(&conn).map_err(map_sqlite)?;
    if let Location::File(path) = location
        && !reader
    {
        let mode = journal_mode_wal(&conn, settings.busy_timeout)?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(path = %path.display(), mode, "SQLite refused WAL mode; readers will block the writer");
        }
    }
    conn.pragma_update(None, "synchronous", settings.synchronous)
        .map_err(map_sqlite)?;
    if reader {
        // A reader never writes: make a slip an error rather than a second writer.
        conn.pragma_update(None, "query_only", true)
            .map_err(map_sqlite)?;
    }
    Ok(conn)
}

/// Switches the file to WAL (a persistent setting, so usually a no-op), retrying while
/// another process holds the lock the switch needs.
fn journal_mode_wal(conn: &Connection, patience: Duration) -> Result<String> {
    let deadline = Instant::now() + patience;
    loop {
        match conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get::<_, String>(0))
        {
            Ok(mode) => return Ok(mode),
            Err(e) if is_busy(&e) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(map_sqlite(e)),
        }
    }
}
