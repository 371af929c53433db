//! Mapping PostgreSQL errors to hopper's.

use hopper_core::Error;
use hopper_core::error::LockNotGranted;
use tokio_postgres::error::SqlState;

/// Turns a driver error into hopper's error: constraint violations and data exceptions
/// become [`Error::InvalidInput`] with the database's own message, a lost connection, a
/// server that is away or a stale prepared statement [`Error::Database`] (transient), and
/// any other answer of the server [`Error::Refused`].
pub fn map_pg(e: tokio_postgres::Error) -> Error {
    if let Some(db) = e.as_db_error() {
        if db.code() == &SqlState::READ_ONLY_SQL_TRANSACTION {
            crate::read_only::note_refusal();
        }
        if let Some(taken) = job_id_taken(db.code().code(), db.constraint(), db.detail()) {
            return taken;
        }
        if let Some(mapped) = classify(db.code().code(), db.message(), db.routine()) {
            return mapped;
        }
    }
    Error::database(e)
}

/// The primary key of hopper's jobs table, whose violation means a job id already taken.
const JOBS_PKEY: &str = "jobs_pkey";

/// [`Error::Conflict`] saying which job id is taken, for a unique violation (SQLSTATE
/// 23505) of the jobs table's primary key (a job enqueued twice with the id of its
/// choosing), rather than the server's text about a constraint. The id comes from the
/// server's detail (`Key (id)=(…) already exists.`), any UUID in it, since the words are
/// translated (`lc_messages`); `None` for any other error.
pub(crate) fn job_id_taken(
    code: &str,
    constraint: Option<&str>,
    detail: Option<&str>,
) -> Option<Error> {
    if code != SqlState::UNIQUE_VIOLATION.code() || constraint != Some(JOBS_PKEY) {
        return None;
    }
    let id = detail.and_then(|d| {
        d.split(['(', ')', ' ', '='])
            .find_map(|word| uuid::Uuid::parse_str(word).ok())
    });
    Some(Error::Conflict(match id {
        Some(id) => format!("a job with id {id} already exists"),
        None => "a job with this id already exists".to_owned(),
    }))
}

/// The server function that refuses to run a prepared statement whose result columns
/// changed type since it was prepared (PostgreSQL's `plancache.c`). The routine rather than
/// the message, which the server translates (`lc_messages`).
const REVALIDATE_CACHED_QUERY: &str = "RevalidateCachedQuery";

/// True when the server refused a statement this connection prepared earlier, not the
/// request: the statement is unknown to the server session (SQLSTATE 26000: a pooler gave
/// the connection another session, which never saw it), or a column it returns changed
/// type since (0A000 from [`REVALIDATE_CACHED_QUERY`]: an `ALTER TABLE`, a migration).
/// Both come when the statement is bound, before it runs. Prepared again, it runs.
pub(crate) fn is_stale_statement(code: &str, message: &str, routine: Option<&str>) -> bool {
    code == SqlState::INVALID_SQL_STATEMENT_NAME.code()
        || (code == SqlState::FEATURE_NOT_SUPPORTED.code()
            && (routine == Some(REVALIDATE_CACHED_QUERY)
                || message == "cached plan must not change result type"))
}

/// True when the statement gave up waiting for a lock another transaction held (SQLSTATE
/// 55P03, past `lock_timeout`): mapped to a [`LockNotGranted`] cause, and read before
/// mapping where a caller goes around the held rows (`outcomes.rs`).
pub(crate) fn lock_not_granted(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE)
}

/// [`is_stale_statement`] for a tokio-postgres error.
pub(crate) fn stale_statement(e: &tokio_postgres::Error) -> bool {
    e.as_db_error()
        .is_some_and(|db| is_stale_statement(db.code().code(), db.message(), db.routine()))
}

/// What to do behind a pooler in transaction mode, said by the errors that show one.
const TELL_THE_POOLER: &str = "tell hopper: HOPPER_POOLER=transaction (`--pooler \
     transaction`), or PgOptions::with_pooler(Pooler::Transaction) in Rust \
     (docs/deployment.md, PgBouncer)";

/// hopper's error for a database error of SQLSTATE `code` (`routine`: the server function
/// that raised it, when the server says), whichever driver reported it; `None` for a
/// plain, transient [`Error::Database`].
pub(crate) fn classify(code: &str, message: &str, routine: Option<&str>) -> Option<Error> {
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
    // A name this connection gave a statement is taken in its server session: only
    // clients sharing a server session meet it, as behind a transaction pooler that hopper
    // was not told of. Each new process names its statements from s0 again, so it fails
    // every time: not transient.
    if is(&SqlState::DUPLICATE_PSTATEMENT) {
        return Some(Error::Refused(format!(
            "{message} (SQLSTATE {code}): another client's statement of that name is in the \
             server session, which happens behind a pooler in transaction mode; \
             {TELL_THE_POOLER}"
        )));
    }
    // The rest of class 42 (a privilege revoked, a column or type not as migrated): the
    // same statement fails again, so it must not be retried as if the database were away.
    if code.starts_with("42") {
        return Some(Error::Refused(format!("{message} (SQLSTATE {code})")));
    }
    // Class 23 beyond the violations above (a foreign key whose row is gone, an exclusion
    // constraint): the data is not as the statement assumed.
    if code.starts_with("23") {
        return Some(Error::Conflict(message.to_owned()));
    }
    if is(&SqlState::LOCK_NOT_AVAILABLE) {
        return Some(Error::database(LockNotGranted(format!(
            "{message} (SQLSTATE {code}): another transaction holds a lock this statement \
             needed; it may succeed once that is free"
        ))));
    }
    // Transient: the address may lead to the primary soon (a failover under way), and
    // the connections made before this answer are replaced (`read_only.rs`).
    if is(&SqlState::READ_ONLY_SQL_TRANSACTION) {
        return Some(Error::Database(
            format!(
                "{message} (SQLSTATE {code}): the server takes no writes: a standby (in \
                 recovery), or default_transaction_read_only is on; hopper needs the primary: \
                 give its address, or list every node with target_session_attrs=read-write \
                 (docs/deployment.md)"
            )
            .into(),
        ));
    }
    if is_transient_state(code) {
        return None;
    }
    // Transient: the statement is prepared again for the retry (`statement.rs` empties
    // the pool's statement caches when it meets one), so the same call then runs.
    if is_stale_statement(code, message, routine) {
        let why = if is(&SqlState::INVALID_SQL_STATEMENT_NAME) {
            format!(
                "the server session behind the connection is not the one that prepared it (a \
                 pooler's RECONNECT, a restarted server; behind a pooler in transaction mode, \
                 {TELL_THE_POOLER})"
            )
        } else {
            "a column it returns changed type since (an ALTER TABLE, a migration)".to_owned()
        };
        return Some(Error::Database(
            format!(
                "{message} (SQLSTATE {code}): a statement prepared on this connection is \
                 stale: {why}; it is prepared again for the next try"
            )
            .into(),
        ));
    }
    // Anything else the server answered (a trigger's RAISE, an internal error, a feature
    // not supported, a read-only role): the same statement fails again, so it is said, not
    // retried quietly for ever.
    Some(Error::Refused(format!("{message} (SQLSTATE {code})")))
}

/// True for the SQLSTATEs that waiting may cure, left as a transient [`Error::Database`]:
/// the connection lost (class 08), a transaction rolled back by a serialization failure or a
/// deadlock (40), resources short (53), an object busy or a lock not available (55), the
/// server shutting down, starting or cancelling (57), an I/O error (58).
fn is_transient_state(code: &str) -> bool {
    ["08", "40", "53", "55", "57", "58"]
        .iter()
        .any(|class| code.starts_with(class))
}

/// Turns a pool error into hopper's error. A backend says it through its connection
/// options ([`crate::PgConnectOptions::pool_error`]), which know the connect bound.
pub fn map_pool(e: deadpool_postgres::PoolError) -> Error {
    match e {
        deadpool_postgres::PoolError::Backend(e) => map_pg(e),
        other => Error::database(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(code: &str) -> &'static str {
        kind_from(code, "said", None)
    }

    fn kind_from(code: &str, message: &str, routine: Option<&str>) -> &'static str {
        match classify(code, message, routine) {
            None | Some(Error::Database(_)) => "transient",
            Some(Error::InvalidInput(_)) => "invalid",
            Some(Error::Schema(_)) => "schema",
            Some(Error::Conflict(_)) => "conflict",
            Some(Error::Refused(_)) => "refused",
            Some(other) => panic!("{code}: {other}"),
        }
    }

    #[test]
    fn a_taken_job_id_is_said_as_such() {
        let id = "0194d3c1-7c3e-7000-8000-000000000001";
        let detail = format!("Key (id)=({id}) already exists.");
        let taken = job_id_taken("23505", Some("jobs_pkey"), Some(&detail));
        let Some(Error::Conflict(message)) = taken else {
            panic!("{taken:?}");
        };
        assert_eq!(message, format!("a job with id {id} already exists"));
        let taken = job_id_taken("23505", Some("jobs_pkey"), Some("Schlüssel existiert"));
        assert!(matches!(taken, Some(Error::Conflict(m)) if m.contains("this id")));
        assert!(job_id_taken("23505", Some("cron_jobs_pkey"), Some(&detail)).is_none());
        assert!(job_id_taken("23503", Some("jobs_pkey"), Some(&detail)).is_none());
    }

    #[test]
    fn only_states_that_waiting_may_cure_are_transient() {
        for (code, expected) in [
            ("08006", "transient"), // connection failure
            ("40001", "transient"), // serialization failure
            ("40P01", "transient"), // deadlock detected
            ("53300", "transient"), // too many connections
            ("55P03", "transient"), // lock not available
            ("57P01", "transient"), // admin shutdown
            ("57P03", "transient"), // cannot connect now (starting up)
            ("58030", "transient"), // I/O error
            ("25006", "transient"), // read-only transaction (a standby, a failover under way)
            ("26000", "transient"), // prepared statement does not exist (a new session)
            ("22023", "invalid"),
            ("23502", "invalid"),
            ("23505", "conflict"),
            ("23503", "conflict"), // foreign key: the row is gone
            ("42P01", "schema"),
            ("42501", "refused"), // insufficient privilege
            ("P0001", "refused"), // a trigger's RAISE EXCEPTION
            ("XX000", "refused"), // internal error
            ("0A000", "refused"), // feature not supported
            ("25P02", "refused"), // in a failed transaction
            // A prepared statement of that name already exists: only clients sharing a
            // server session (named statements behind a transaction pooler) meet it.
            ("42P05", "refused"),
        ] {
            assert_eq!(kind(code), expected, "SQLSTATE {code}");
        }
    }

    #[test]
    fn a_statement_whose_result_changed_type_is_prepared_again() {
        let changed = "cached plan must not change result type";
        assert_eq!(
            kind_from("0A000", "translated", Some(REVALIDATE_CACHED_QUERY)),
            "transient"
        );
        assert_eq!(kind_from("0A000", changed, None), "transient");
        assert_eq!(kind_from("0A000", "said", Some("other")), "refused");
        assert!(is_stale_statement("26000", "said", None));
        assert!(!is_stale_statement("42P05", "said", None));
    }
}
