//! Mapping SQLite errors to hopper's.

use hopper_core::Error;
use rusqlite::ffi;

/// Turns a driver error into hopper's error: CHECK and NOT NULL violations become
/// [`Error::InvalidInput`] with SQLite's own message, primary-key and unique violations
/// [`Error::Conflict`], a missing table [`Error::Schema`] (not migrated), everything else
/// [`Error::Database`].
pub fn map_sqlite(e: rusqlite::Error) -> Error {
    if let rusqlite::Error::SqliteFailure(failure, message) = &e {
        let message = message.clone().unwrap_or_else(|| failure.to_string());
        match failure.extended_code {
            ffi::SQLITE_CONSTRAINT_CHECK | ffi::SQLITE_CONSTRAINT_NOTNULL => {
                return Error::InvalidInput(message);
            }
            ffi::SQLITE_CONSTRAINT_PRIMARYKEY | ffi::SQLITE_CONSTRAINT_UNIQUE => {
                return Error::Conflict(message);
            }
            _ => {}
        }
        if message.starts_with("no such table") {
            return Error::Schema(format!(
                "{message}: the tables are missing or not migrated; run `hopper migrate`"
            ));
        }
    }
    Error::database(e)
}

/// True when SQLite answered "database is locked" (another connection holds the lock for
/// longer than the busy timeout allowed, or a lock could not be waited for at all).
pub fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}
