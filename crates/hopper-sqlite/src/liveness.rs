//! Node liveness on SQLite ([`NodeLiveness`]): each node holds an exclusive OS lock
//! (`flock`) on a file of its own, `<database>-nodes/<node id>.lock`, and records the
//! file's path in its row. The operating system releases the lock when the process ends,
//! however it ends (SIGKILL included), so the other processes working on the same
//! database find the file unlocked and release the node's jobs at once.
//!
//! The checker takes the lock of a vanished node's file itself and keeps it while it
//! releases the node (as PostgreSQL's transaction-level lock does), then deletes the file;
//! a node that shuts down cleanly deletes its own when it deregisters.
//! A registered file that is missing (removed by hand, or a database reached through
//! another path) proves nothing: that node is left to the heartbeat check. A process cannot
//! lose its own lock while it lives, so a hold here is never lost. An in-memory database
//! lives in one process: it offers no liveness.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use futures_util::FutureExt;
use hopper_core::{Error, NodeHold, NodeId, NodeInfo, NodeLiveness, Result};
use rusqlite::{OptionalExtension, named_params};

use crate::error::map_sqlite;
use crate::outcome::released_rows;
use crate::rows::{col, micros, rfc3339};
use crate::{Location, SqliteBackend};

/// Holds a lock file: dropping it releases the lock, and deletes the file if `remove`. A
/// registered node's file stays when its hold is dropped, as when its process dies: the
/// node's deregistration deletes it, or the release of the vanished node.
struct Guard {
    _file: File,
    path: PathBuf,
    remove: bool,
}

impl Guard {
    fn new(file: File, path: PathBuf) -> Self {
        Guard {
            _file: file,
            path,
            remove: true,
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.remove {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The directory of a database's lock files: beside the file, named after it.
fn lock_dir(database: &Path) -> Result<PathBuf> {
    let database = std::fs::canonicalize(database).map_err(Error::database)?;
    let mut name = database.into_os_string();
    name.push("-nodes");
    Ok(PathBuf::from(name))
}

/// Opens the lock file at `path` (creating it if `create`) and tries to lock it: the file
/// if it was free, `None` if another holder has it.
fn try_lock(path: &Path, create: bool) -> std::io::Result<Option<File>> {
    let file = OpenOptions::new()
        .write(true)
        .create(create)
        .truncate(false)
        .open(path)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(e),
    }
}

impl SqliteBackend {
    /// The database file, if this backend offers liveness (a file, not memory).
    pub(crate) fn liveness_file(&self) -> Option<&Path> {
        match self.location() {
            Location::File(path) => Some(path),
            Location::Memory => None,
        }
    }
}

#[async_trait]
impl NodeLiveness for SqliteBackend {
    async fn node_hold(&self, node: &NodeInfo) -> Result<NodeHold> {
        let database = self.liveness_file().ok_or_else(|| {
            Error::Unsupported("node liveness on an in-memory database".to_owned())
        })?;
        let dir = lock_dir(database)?;
        std::fs::create_dir_all(&dir).map_err(Error::database)?;
        let path = dir.join(format!("{}.lock", node.id));
        let text = path
            .to_str()
            .map(str::to_owned)
            .ok_or_else(|| Error::InvalidInput(format!("lock file path {path:?} is not UTF-8")))?;
        let file = try_lock(&path, true)
            .map_err(Error::database)?
            .ok_or_else(|| {
                Error::Conflict(format!("the lock file {text} of node {} is held", node.id))
            })?;
        // The lock is held before the row names it; dropped on an error below, the guard
        // deletes the file again.
        let mut guard = Guard::new(file, path);
        self.register(node, Some(text)).await?;
        guard.remove = false;
        Ok(NodeHold::new(
            futures_util::future::pending().boxed(),
            Box::new(guard),
        ))
    }

    async fn node_let_go(&self, node: NodeId) -> Result<()> {
        let inner = self.inner.clone();
        let path: Option<String> = self
            .inner
            .pool
            .write_tx(move |tx| {
                let id = node.hyphenated().to_string();
                let q = &inner.queries.node_let_go;
                let path = tx
                    .prepare_cached(&q[0])
                    .and_then(|mut s| {
                        s.query_row(named_params! { ":id": id }, |r| r.get(0))
                            .optional()
                    })
                    .map(Option::flatten)
                    .map_err(map_sqlite)?;
                tx.prepare_cached(&q[1])
                    .and_then(|mut s| s.execute(named_params! { ":id": id }))
                    .map_err(map_sqlite)?;
                Ok(path)
            })
            .await?;
        // Still locked by this node, which gives the lock back after this.
        if let Some(path) = path {
            let _ = std::fs::remove_file(path);
        }
        Ok(())
    }

    async fn node_release_vanished(&self) -> Result<u64> {
        let holders = self.lock_holders(i64::MAX).await?;
        // The files of vanished nodes, locked by this process until they are released.
        let mut vanished: Vec<(String, Guard)> = Vec::new();
        for (id, path) in holders {
            match try_lock(&path, false) {
                Ok(Some(file)) => vanished.push((id, Guard::new(file, path))),
                Ok(None) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(node = %id, path = %path.display(), error = %e, "checking a node's lock file failed");
                }
            }
        }
        let mut count = 0;
        for (id, mut guard) in vanished {
            let released = self.release_dead(Release::Vanished(id.clone())).await;
            // Kept on a failure: its row still names the file, and the next check finds it
            // free again.
            guard.remove = released.is_ok();
            drop(guard);
            let n = released?;
            tracing::info!(node = %id, jobs = n, "node vanished: its lock file was free");
            count += n;
        }
        Ok(count)
    }
}

impl SqliteBackend {
    /// The registered holders of a lock file whose heartbeat is older than `dead_before`
    /// (µs; `i64::MAX` for all), with their files (`node_lock_paths.sql`).
    async fn lock_holders(&self, dead_before: i64) -> Result<Vec<(String, PathBuf)>> {
        let inner = self.inner.clone();
        self.inner
            .pool
            .read(move |conn| {
                let mut statement = conn
                    .prepare_cached(&inner.queries.node_lock_paths[0])
                    .map_err(map_sqlite)?;
                let mut rows = statement
                    .query(named_params! { ":dead_before": dead_before })
                    .map_err(map_sqlite)?;
                let mut out = Vec::new();
                while let Some(row) = rows.next().map_err(map_sqlite)? {
                    out.push((col(row, 0)?, PathBuf::from(col::<String>(row, 1)?)));
                }
                Ok(out)
            })
            .await
    }

    /// Releases the jobs of the nodes whose heartbeat is older than `dead_before` (µs) and
    /// forgets them, sparing those whose lock file another holder has: such a node lives
    /// (its process holds the lock), and only its heartbeat was held up, by a writer that
    /// kept the database locked past the silent bound; once that writer ends, this
    /// release might otherwise take the write lock before the node's waiting heartbeat.
    /// Its leases still expire if it stopped renewing them.
    pub(crate) async fn release_silent(&self, dead_before: i64) -> Result<u64> {
        let mut alive = Vec::new();
        for (id, path) in self.lock_holders(dead_before).await? {
            // A free file (its holder ended) or a missing one proves no life.
            if let Ok(None) = try_lock(&path, false) {
                alive.push(id);
            }
        }
        self.release_dead(Release::Silent {
            dead_before,
            spared: alive,
        })
        .await
    }

    /// Registers `node` or refreshes its heartbeat (`node_heartbeat.sql`); `lock_path`
    /// names the lock file it holds, `None` keeps what is stored.
    pub(crate) async fn register(&self, node: &NodeInfo, lock_path: Option<String>) -> Result<()> {
        let inner = self.inner.clone();
        let now = micros(self.now());
        let node = node.clone();
        self.inner
            .pool
            .write_tx(move |tx| {
                let queues = serde_json::to_string(&node.queues)?;
                tx.prepare_cached(&inner.queries.node_heartbeat[0])
                    .and_then(|mut s| {
                        s.execute(named_params! {
                            ":id": node.id.hyphenated().to_string(),
                            ":name": node.name,
                            ":queues": queues,
                            ":concurrency": node.concurrency,
                            ":now": now,
                            ":lock_path": lock_path,
                        })
                    })
                    .map_err(map_sqlite)?;
                Ok(())
            })
            .await
    }

    /// Releases the running jobs of the nodes `which` names, a failed attempt each, and
    /// forgets those nodes (`node_release_dead.sql`). Returns how many jobs.
    pub(crate) async fn release_dead(&self, which: Release) -> Result<u64> {
        let inner = self.inner.clone();
        let now = self.now();
        let (count, woken) = self
            .inner
            .pool
            .write_tx(move |tx| release_in(tx, &inner.queries, now, &which))
            .await?;
        self.wake_queues(&woken);
        Ok(count)
    }
}

/// Which nodes a release takes (`node_release_dead.sql`).
#[derive(Debug, Clone)]
pub(crate) enum Release {
    /// Nodes whose heartbeat is older than `dead_before` (µs), but those of `spared`
    /// (silent nodes whose lock file another holder has: they live).
    Silent {
        dead_before: i64,
        spared: Vec<String>,
    },
    /// This node, whose lock file the caller found free and holds (its process ended).
    Vanished(String),
    /// This node, stopping: what still runs under it.
    Stopping(String),
}

/// Runs the release `which` inside `tx`: every running job of those nodes goes back to its
/// queue (or to `failed` at its last attempt), the reason in its error history, and the
/// nodes are forgotten. SQLite writes one transaction at a time, so no job is skipped:
/// each node goes with all its jobs. Returns how many jobs, and the queues to wake.
pub(crate) fn release_in(
    tx: &rusqlite::Transaction<'_>,
    queries: &crate::sql::Queries,
    now: chrono::DateTime<chrono::Utc>,
    which: &Release,
) -> Result<(u64, Vec<String>)> {
    let (dead_before, node, spared, reason) = match which {
        Release::Silent {
            dead_before,
            spared,
        } => (
            *dead_before,
            None,
            spared.as_slice(),
            " stopped heartbeating",
        ),
        Release::Vanished(id) => (
            i64::MIN,
            Some(id),
            &[][..],
            " vanished: its lock file was released (its process ended)",
        ),
        Release::Stopping(id) => (
            i64::MIN,
            Some(id),
            &[][..],
            " stopped while this job still ran (its handler had not ended by the shutdown \
             deadline, or its outcome could not be written)",
        ),
    };
    let spared = serde_json::to_string(spared)?;
    let q = &queries.node_release_dead;
    let mut statement = tx.prepare_cached(&q[0]).map_err(map_sqlite)?;
    let released = released_rows(
        &mut statement,
        named_params! {
            ":now": micros(now),
            ":now_text": rfc3339(now),
            ":dead_before": dead_before,
            ":id": node,
            ":spared": spared,
            ":reason": reason,
        },
    )?;
    tx.prepare_cached(&q[1])
        .and_then(|mut s| {
            s.execute(named_params! {
                ":dead_before": dead_before,
                ":id": node,
                ":spared": spared,
            })
        })
        .map_err(map_sqlite)?;
    Ok(released)
}

/// The lock file a node would hold on the database at `database` (for tests and tools).
pub fn lock_file(database: &Path, node: NodeId) -> Result<PathBuf> {
    Ok(lock_dir(database)?.join(format!("{node}.lock")))
}
