//! The error type shared by every hopper crate.

use crate::lease::Lease;

/// Everything that can go wrong in hopper, from bad input to a lost database.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The worker no longer owns the job: its lease expired and the job was claimed again,
    /// released, cancelled or finished by someone else. The outcome was discarded.
    #[error("lease lost for job {} attempt {}: the job was re-claimed, released, cancelled or finished elsewhere", .0.job_id, .0.attempt)]
    LeaseLost(Lease),

    /// Input was refused before anything was written (bad queue name, invalid args, …).
    #[error("invalid input: {0}")]
    InvalidInput(String),

    /// The job (or other entity) does not exist.
    #[error("not found: {0}")]
    NotFound(String),

    /// The operation does not apply to the job in its current state.
    #[error("conflict: {0}")]
    Conflict(String),

    /// The database schema is newer than this build of hopper understands.
    #[error("schema mismatch: {0}")]
    Schema(String),

    /// The database refused the statement for a reason that waiting will not cure: the
    /// role lacks a privilege, an object is not what hopper expects, a trigger raised, the
    /// server failed internally (on PostgreSQL, any SQLSTATE but a lost connection, a
    /// rolled-back transaction, short resources, a busy object, a shutdown, an I/O error or
    /// a read-only transaction). Not transient: a maintenance service that meets it gives
    /// up instead of retrying quietly.
    #[error("refused by the database: {0}")]
    Refused(String),

    /// The backend cannot do this at all (said plainly rather than done silently wrong).
    #[error("unsupported by this backend: {0}")]
    Unsupported(String),

    /// Job arguments could not be encoded or decoded.
    #[error("job arguments: {0}")]
    Args(#[from] serde_json::Error),

    /// The storage backend failed (connection lost, statement error, …).
    #[error("database: {0}")]
    Database(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),

    /// The runtime was shut down while the operation was under way.
    #[error("shut down")]
    Shutdown,

    /// A wait ended before its condition held (what was awaited, and the last thing seen).
    #[error("timed out: {0}")]
    Timeout(String),
}

impl Error {
    /// Wraps any backend error.
    pub fn database(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Error::Database(Box::new(e))
    }

    /// True when retrying the same call later may succeed (the database was unreachable).
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Database(_))
    }

    /// True when the call gave up waiting for a lock another transaction held (the cause is
    /// a [`LockNotGranted`]): transient, and worth saying so to whoever asked.
    pub fn is_lock_not_granted(&self) -> bool {
        matches!(self, Error::Database(e) if e.downcast_ref::<LockNotGranted>().is_some())
    }

    /// The error with the chain of its causes, for logs: a database error says what the
    /// database said ("database: db error: ERROR: …"), not only "db error".
    pub fn with_causes(&self) -> String {
        with_causes(self)
    }
}

/// The cause of a transient [`Error::Database`] when a statement gave up waiting for a lock
/// another transaction held (a row an open transaction locked, a table being altered),
/// past the bound set for it: the same call may succeed once the lock is free.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LockNotGranted(pub String);

/// Any error with the chain of its causes, each left out when the text already says it
/// (an HTTP client's "error sending request" then says why: the refused certificate).
pub fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

/// `Result` with hopper's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
