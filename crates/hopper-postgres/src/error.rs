//! Mapping PostgreSQL errors to hopper's.

use hopper_core::Error;
use tokio_postgres::error::SqlState;

/// Turns a driver error into hopper's error: constraint violations and data exceptions
/// become [`Error::InvalidInput`] with the database's own message, everything else
/// [`Error::Database`].
pub fn map_pg(e: tokio_postgres::Error) -> Error {
    if let Some(db) = e.as_db_error() {
        let code = db.code();
        if *code == SqlState::CHECK_VIOLATION
            || *code == SqlState::INVALID_PARAMETER_VALUE
            || *code == SqlState::INVALID_TEXT_REPRESENTATION
            || *code == SqlState::NOT_NULL_VIOLATION
        {
            return Error::InvalidInput(db.message().to_owned());
        }
        // Class 22, data exceptions (a value out of range, an overflowing interval): the
        // same statement with the same values fails again, so it is not worth retrying.
        if code.code().starts_with("22") {
            return Error::InvalidInput(db.message().to_owned());
        }
        if *code == SqlState::UNDEFINED_TABLE || *code == SqlState::UNDEFINED_FUNCTION {
            return Error::Schema(format!(
                "{}: the schema is missing or not migrated; run `hopper migrate`",
                db.message()
            ));
        }
        if *code == SqlState::UNIQUE_VIOLATION {
            return Error::Conflict(db.message().to_owned());
        }
    }
    Error::database(e)
}

/// Turns a pool error into hopper's error.
pub fn map_pool(e: deadpool_postgres::PoolError) -> Error {
    match e {
        deadpool_postgres::PoolError::Backend(e) => map_pg(e),
        other => Error::database(other),
    }
}
