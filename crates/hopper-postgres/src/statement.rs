//! How hopper's statements reach the server, with or without a pooler in transaction mode.
//!
//! Connected straight to PostgreSQL (or through a pooler in session mode), every pooled
//! connection is one server session: hopper prepares its frequent statements once per
//! connection (named prepared statements, one round trip per execution after the first)
//! and sends the others as text, which the driver prepares, runs and closes.
//!
//! Behind a pooler in transaction mode (PgBouncer's `pool_mode = transaction`), each
//! transaction of a client connection may run on another server session, so a statement
//! prepared in one is unknown in the next, and a name one client leaves behind collides
//! with the same name from another process. There ([`Pooler::Transaction`]) no statement
//! has a name: each is parsed, bound and run in one message (the unnamed statement,
//! tokio-postgres' `query_typed`), which needs the parameters' types up front; each
//! [`Query`] carries them (declared in `sql.rs`, checked against the server by the
//! `postgres_sql` tests).
//!
//! A statement prepared earlier can go stale under a connection: a column it returns
//! changes type (an `ALTER TABLE`, a migration), or a pooler hands the connection another
//! server session, which never saw it. The server refuses it when it is bound, before it
//! runs; the error is transient (`error.rs`), and every connection of the pool forgets
//! its prepared statements ([`forget_if_stale`]), so the retry prepares them again.

use std::fmt;
use std::str::FromStr;

use deadpool_postgres::Object;
use hopper_core::Error;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{GenericClient, Row, Statement};

use crate::error::stale_statement;

/// The arguments of one statement, in order.
pub(crate) type Args<'a> = [&'a (dyn ToSql + Sync)];

/// One SQL statement bound to a schema, and the types of its parameters (`$1`, `$2`, …).
#[derive(Debug, Clone)]
pub struct Query {
    /// The SQL text.
    pub sql: String,
    /// The type of each parameter, in order.
    pub types: Vec<Type>,
}

impl Query {
    /// A statement with its parameters' types.
    pub fn new(sql: impl Into<String>, types: &[Type]) -> Self {
        Query {
            sql: sql.into(),
            types: types.to_vec(),
        }
    }
}

/// What sits between hopper and PostgreSQL, as far as session state goes
/// ([`crate::PgOptions::pooler`], `HOPPER_POOLER` for the `hopper` binary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pooler {
    /// Every connection is a session of its own: PostgreSQL itself, or a pooler in
    /// session mode. Frequent statements are prepared once per connection.
    #[default]
    None,
    /// A pooler in transaction mode (PgBouncer `pool_mode = transaction`): hopper keeps no
    /// state in a session beyond one transaction. No named prepared statements, settings
    /// only with `SET LOCAL`, no session advisory locks, no `COPY` (bulk inserts are one
    /// `INSERT … SELECT unnest(…)`), and LISTEN only on
    /// [`crate::PgOptions::direct_url`] (without one, workers poll).
    Transaction,
}

impl Pooler {
    /// True when statements must go unnamed.
    pub(crate) fn unnamed(self) -> bool {
        self == Pooler::Transaction
    }

    /// `query` ready to run on the pooled connection `client`: prepared there once and
    /// cached, or unnamed behind a transaction pooler.
    pub(crate) async fn prepare<'q>(
        self,
        client: &'q Object,
        query: &'q Query,
    ) -> Result<Ready<'q>, tokio_postgres::Error> {
        match self {
            Pooler::None => {
                let statement = client.prepare_cached(&query.sql).await?;
                Ok(Ready::Prepared {
                    statement,
                    on: client,
                })
            }
            Pooler::Transaction => Ok(Ready::Unnamed(query)),
        }
    }

    /// `query` sent whole at each run: as text (the driver prepares, runs and closes it),
    /// or unnamed behind a transaction pooler.
    pub(crate) fn text(self, query: &Query) -> Ready<'_> {
        match self {
            Pooler::None => Ready::Text(&query.sql),
            Pooler::Transaction => Ready::Unnamed(query),
        }
    }
}

impl fmt::Display for Pooler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Pooler::None => "none",
            Pooler::Transaction => "transaction",
        })
    }
}

impl FromStr for Pooler {
    type Err = Error;

    /// `none` (or `session`: a pooler in session mode keeps sessions) or `transaction`.
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "none" | "session" => Ok(Pooler::None),
            "transaction" => Ok(Pooler::Transaction),
            other => Err(Error::InvalidInput(format!(
                "pooler {other:?}: expected none, session or transaction"
            ))),
        }
    }
}

/// A statement ready to run on one connection (see [`Pooler::prepare`], [`Pooler::text`]).
/// Each run sends its messages when first polled, so runs can be pipelined with
/// `tokio::join!`.
pub(crate) enum Ready<'q> {
    /// Prepared on the pooled connection `on`, and cached there.
    Prepared {
        statement: Statement,
        on: &'q Object,
    },
    /// Text the driver prepares for each run.
    Text(&'q str),
    /// Parsed, bound and run in one message, with no name.
    Unnamed(&'q Query),
}

impl Ready<'_> {
    /// The rows the statement returns.
    pub(crate) async fn query(
        &self,
        client: &impl GenericClient,
        args: &Args<'_>,
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        match self {
            Ready::Prepared { statement, on } => {
                forget_if_stale(on, client.query(statement, args).await)
            }
            Ready::Text(sql) => client.query(*sql, args).await,
            Ready::Unnamed(query) => client.query_typed(&query.sql, &typed(query, args)).await,
        }
    }

    /// The one row the statement returns (an error if it returns none or several).
    pub(crate) async fn query_one(
        &self,
        client: &impl GenericClient,
        args: &Args<'_>,
    ) -> Result<Row, tokio_postgres::Error> {
        match self {
            Ready::Prepared { statement, on } => {
                forget_if_stale(on, client.query_one(statement, args).await)
            }
            Ready::Text(sql) => client.query_one(*sql, args).await,
            Ready::Unnamed(query) => {
                client
                    .query_typed_one(&query.sql, &typed(query, args))
                    .await
            }
        }
    }

    /// The row the statement returns, if any (an error if several).
    pub(crate) async fn query_opt(
        &self,
        client: &impl GenericClient,
        args: &Args<'_>,
    ) -> Result<Option<Row>, tokio_postgres::Error> {
        match self {
            Ready::Prepared { statement, on } => {
                forget_if_stale(on, client.query_opt(statement, args).await)
            }
            Ready::Text(sql) => client.query_opt(*sql, args).await,
            Ready::Unnamed(query) => {
                client
                    .query_typed_opt(&query.sql, &typed(query, args))
                    .await
            }
        }
    }

    /// How many rows the statement changed.
    pub(crate) async fn execute(
        &self,
        client: &impl GenericClient,
        args: &Args<'_>,
    ) -> Result<u64, tokio_postgres::Error> {
        match self {
            Ready::Prepared { statement, on } => {
                forget_if_stale(on, client.execute(statement, args).await)
            }
            Ready::Text(sql) => client.execute(*sql, args).await,
            Ready::Unnamed(query) => client.execute_typed(&query.sql, &typed(query, args)).await,
        }
    }
}

/// `result`, after emptying the statement cache of every connection of `on`'s pool when
/// it says that a prepared statement is stale (see the module docs): a changed column or a
/// new server session makes the same statement stale on every connection, so they all
/// forget their statements at the first such error rather than each meeting it once.
/// The statements dropped are closed on the server as their last user lets them go.
pub(crate) fn forget_if_stale<T>(
    on: &Object,
    result: Result<T, tokio_postgres::Error>,
) -> Result<T, tokio_postgres::Error> {
    if let Err(e) = &result
        && stale_statement(e)
    {
        match Object::pool(on) {
            Some(pool) => pool.manager().statement_caches.clear(),
            None => on.statement_cache.clear(),
        }
    }
    result
}

/// The driver's client under a pooled connection, to run a [`Ready`] statement on.
pub(crate) fn driver(object: &Object) -> &tokio_postgres::Client {
    object
}

/// The arguments paired with the query's declared types. A count that differs is sent
/// as is: the server refuses it with a clear error.
fn typed<'a>(query: &Query, args: &Args<'a>) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    args.iter()
        .zip(query.types.iter().chain(std::iter::repeat(&Type::UNKNOWN)))
        .map(|(arg, ty)| (*arg, ty.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooler_names_parse() {
        assert_eq!(
            "transaction".parse::<Pooler>().ok(),
            Some(Pooler::Transaction)
        );
        assert_eq!(
            "Transaction ".parse::<Pooler>().ok(),
            Some(Pooler::Transaction)
        );
        assert_eq!("session".parse::<Pooler>().ok(), Some(Pooler::None));
        assert_eq!("none".parse::<Pooler>().ok(), Some(Pooler::None));
        assert!("statement".parse::<Pooler>().is_err());
        assert_eq!(Pooler::Transaction.to_string(), "transaction");
    }
}
