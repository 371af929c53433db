//! Mapping PostgreSQL errors to hopper's.

use hopper_core::Error;
use tokio_postgres::error::SqlState;

/// Turns a driver error into hopper's error: constraint violations and data exceptions
/// become [`Error::InvalidInput`] with the database's own message, everything else
/// [`Error::Database`].
pub fn map_pg(e: tokio_postgres::Error) -> Error {
    if let Some(db) = e.as_db_error()
        && let Some(mapped) = classify(db.code().code(), db.message())
    {
        return mapped;
    }
    Error::database(e)
}

/// hopper's error for a database error of SQLSTATE `code`, whichever driver reported it;
/// `None` for a plain [`Error::Database`].
pub(crate) fn classify(code: &str, message: &str) -> Option<Error> {
    let is = |state: &SqlState| code == state.code();
    if is(&SqlState::CHECK_VIOLATION)
        || is(&SqlState::INVALID_PARAMETER_VALUE)
        || is(&SqlState::INVALID_TEXT_REPRESENTATION)
        || is(&SqlState::NOT_NULL_VIOLATION)
    {
        return Some(Error::InvalidInput(message.to_owned()));
    }
    // Class 22, data exceptions (a value out of range, an overflowing interval): the
    // same statement with the same values fails again, so it is not worth retrying.
    if code.starts_with("22") {
        return Some(Error::InvalidInput(message.to_owned()));
    }
    if is(&SqlState::UNDEFINED_TABLE) || is(&SqlState::UNDEFINED_FUNCTION) {
        return Some(Error::Schema(format!(
            "{message}: the schema is missing or not migrated; run `hopper migrate`"
        )));
    }
    // The rest of class 42 (a privilege revoked, a column or type not as migrated): the
    // same statement fails again, so it must not be retried as if the database were away.
    if code.starts_with("42") {
        return Some(Error::Refused(format!("{message} (SQLSTATE {code})")));
    }
    if is(&SqlState::UNIQUE_VIOLATION) {
        return Some(Error::Conflict(message.to_owned()));
    }
    None
}

/// Turns a pool error into hopper's error.
pub fn map_pool(e: deadpool_postgres::PoolError) -> Error {
    match e {
        deadpool_postgres::PoolError::Backend(e) => map_pg(e),
        other => Error::database(other),
    }
}
