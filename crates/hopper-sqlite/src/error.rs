//! Mapping SQLite errors to hopper's.

use hopper_core::Error;
use rusqlite::ffi;

/// Turns a driver error into hopper's error: CHECK and NOT NULL violations and values too
/// big become [`Error::InvalidInput`] with SQLite's own message, other constraint violations
/// (a key taken, a foreign key's row gone) [`Error::Conflict`], a missing table
/// [`Error::Schema`] (not migrated); a busy or locked database, an I/O error, a full disk,
/// a file that cannot be opened (yet), a schema changed under a statement, an interrupted
/// statement or exhausted memory a transient [`Error::Database`]; any other answer of SQLite
/// (a read-only or corrupt file, a trigger that raised, an SQL error such as a column not
/// as migrated) [`Error::Refused`], since the same statement fails again. An error that is
/// not SQLite's (a value that does not decode) stays [`Error::Database`].
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
        use rusqlite::ErrorCode as C;
        return match failure.code {
            C::DatabaseBusy
            | C::DatabaseLocked
            | C::SystemIoFailure
            | C::DiskFull
            | C::CannotOpen
            | C::SchemaChanged
            | C::OperationInterrupted
            | C::OutOfMemory => Error::database(e),
            C::TooBig => Error::InvalidInput(message),
            C::ConstraintViolation if failure.extended_code != ffi::SQLITE_CONSTRAINT_TRIGGER => {
                Error::Conflict(message)
            }
            _ => Error::Refused(format!("{message} (SQLite code {})", failure.extended_code)),
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(extended_code: i32, message: &str) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(ffi::Error::new(extended_code), Some(message.to_owned()))
    }

    #[test]
    fn only_failures_that_waiting_may_cure_are_transient() {
        for (code, expected) in [
            (ffi::SQLITE_BUSY, "transient"),
            (ffi::SQLITE_LOCKED, "transient"),
            (ffi::SQLITE_IOERR_FSYNC, "transient"),
            (ffi::SQLITE_FULL, "transient"),
            (ffi::SQLITE_CANTOPEN, "transient"),
            (ffi::SQLITE_CONSTRAINT_CHECK, "invalid"),
            (ffi::SQLITE_TOOBIG, "invalid"),
            (ffi::SQLITE_CONSTRAINT_UNIQUE, "conflict"),
            (ffi::SQLITE_CONSTRAINT_FOREIGNKEY, "conflict"),
            (ffi::SQLITE_CONSTRAINT_TRIGGER, "refused"),
            (ffi::SQLITE_READONLY, "refused"),
            (ffi::SQLITE_CORRUPT, "refused"),
            (ffi::SQLITE_NOTADB, "refused"),
            (ffi::SQLITE_ERROR, "refused"), // an SQL error: "no such column: …"
        ] {
            let kind = match map_sqlite(failure(code, "said")) {
                e @ Error::Database(_) if e.is_transient() => "transient",
                Error::InvalidInput(_) => "invalid",
                Error::Conflict(_) => "conflict",
                Error::Refused(_) => "refused",
                other => panic!("{code}: {other}"),
            };
            assert_eq!(kind, expected, "SQLite code {code}");
        }
        let schema = map_sqlite(failure(ffi::SQLITE_ERROR, "no such table: jobs"));
        assert!(matches!(schema, Error::Schema(_)), "{schema}");
    }
}
