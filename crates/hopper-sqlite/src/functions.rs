//! The SQL functions hopper registers on each of its SQLite connections: policy that
//! PostgreSQL keeps in functions of hopper's schema, which SQLite cannot store, written
//! once in hopper-core and called from the `.sql` files.

use hopper_core::limits::error_history_pushed;
use rusqlite::Connection;
use rusqlite::functions::{Context, FunctionFlags};

/// Registers the functions on `conn`. Their names have no `hopper_` prefix, which
/// [`crate::sql::bind`] would rename with the tables. `DIRECTONLY`: a trigger or view of a
/// database file written by someone else cannot call them.
pub(crate) fn register(conn: &Connection) -> rusqlite::Result<()> {
    conn.create_scalar_function(
        "error_history_pushed",
        2,
        FunctionFlags::SQLITE_UTF8
            | FunctionFlags::SQLITE_DETERMINISTIC
            | FunctionFlags::SQLITE_DIRECTONLY,
        history_pushed,
    )
}

/// `error_history_pushed(errors, entry)`: the JSON text of a job's error history
/// with `entry` (JSON text, as `json_object` gives it) appended, keeping the latest
/// [`hopper_core::limits::MAX_ERROR_HISTORY`] entries.
fn history_pushed(ctx: &Context<'_>) -> rusqlite::Result<String> {
    let errors: String = ctx.get(0)?;
    let entry: String = ctx.get(1)?;
    // The column is checked with json_valid(); text that still fails to parse (nesting
    // past serde_json's limit, written by hand) is a history not worth keeping.
    let errors = serde_json::from_str(&errors).unwrap_or(serde_json::Value::Null);
    let entry = serde_json::from_str(&entry)
        .map_err(|e| rusqlite::Error::UserFunctionError(Box::new(e)))?;
    serde_json::to_string(&error_history_pushed(errors, entry))
        .map_err(|e| rusqlite::Error::UserFunctionError(Box::new(e)))
}
