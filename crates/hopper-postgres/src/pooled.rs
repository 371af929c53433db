//! A pooled connection on which hopper opens a transaction by hand (`BEGIN` … `COMMIT`
//! pipelined with the statements between, which `tokio_postgres::Transaction` cannot do).
//!
//! Such a connection must never go back to the pool inside that transaction, yet it can be
//! left there two ways: a statement fails before the `COMMIT` is sent, or the future doing
//! the work is dropped midway (a caller's `select!` or timeout: the W5 feeder is dropped that
//! way, and the next user of the connection got "current transaction is aborted"). So the
//! connection leaves the pool when this guard is dropped, unless the work reached its end
//! and said so with [`TxConnection::release`]. The same holds for a session setting made
//! around a statement ([`generic_plan`]), and for its transaction behind a transaction
//! pooler.

use std::future::Future;
use std::ops::Deref;

use deadpool_postgres::Object;
use hopper_core::Result;

use crate::PgBackend;
use crate::error::map_pg;
use crate::scheduling::{GENERIC_PLAN_OFF, GENERIC_PLAN_ON};
use crate::statement::Pooler;

/// See the module docs.
pub(crate) struct TxConnection {
    object: Option<Object>,
}

impl TxConnection {
    pub(crate) fn new(object: Object) -> Self {
        TxConnection {
            object: Some(object),
        }
    }

    /// The transaction ended (committed, or rolled back by its `COMMIT`): the connection
    /// goes back to the pool.
    pub(crate) fn release(mut self) {
        drop(self.object.take());
    }
}

impl Deref for TxConnection {
    type Target = Object;

    fn deref(&self) -> &Object {
        // Only `release` and `drop` take the object, and both consume the guard.
        self.object
            .as_ref()
            .expect("the connection is held until release or drop")
    }
}

impl Drop for TxConnection {
    fn drop(&mut self) {
        if let Some(object) = self.object.take() {
            // Closed rather than reused: PostgreSQL rolls back whatever it was inside.
            drop(Object::take(object));
        }
    }
}

/// Runs `work` (statements prepared beforehand, so that it sends at its first poll) on
/// `client` with a generic plan: the setting, the work and its undoing
/// ([`generic_plan_brackets`]) pipelined in one round trip. The caller releases the
/// connection once this returned Ok; failed or cancelled before the end, the guard's drop
/// keeps it out of the pool.
pub(crate) async fn generic_plan<T>(
    client: &TxConnection,
    pooler: Pooler,
    work: impl Future<Output = std::result::Result<T, tokio_postgres::Error>>,
) -> Result<T> {
    bracketed(client, generic_plan_brackets(pooler), work)
        .await?
        .map_err(map_pg)
}

/// Runs `work` on `client` between `before` and `after` (simple statements: settings and
/// their undoing), the three pipelined in one round trip. A bracket's error is returned;
/// `work`'s output, errors included, is the caller's to read.
pub(crate) async fn bracketed<T>(
    client: &TxConnection,
    (before, after): (&str, &str),
    work: impl Future<Output = T>,
) -> Result<T> {
    let (on, done, off) = tokio::join!(
        client.batch_execute(before),
        work,
        client.batch_execute(after),
    );
    on.map_err(map_pg)?;
    off.map_err(map_pg)?;
    Ok(done)
}

/// What opens a transaction whose statements wait at most `lock_timeout` (PostgreSQL's
/// literal, `5000ms`) for a lock, or, with none, as long as it takes: a shared log writer's
/// second try, and an operator's statement behind a transaction pooler
/// ([`PgBackend::lock_bounded`]).
pub(crate) fn begin_with_lock_timeout(lock_timeout: Option<&str>) -> String {
    format!(
        "BEGIN; SET LOCAL lock_timeout = '{}'",
        lock_timeout.unwrap_or("0")
    )
}

impl PgBackend {
    /// Runs `work`, statements on one pooled connection that take row locks on an
    /// operator's request (a cancel, a retry, a queue's settings), within the pool's lock
    /// bound ([`crate::PgOptions::lock_timeout`]). Directly connected, the connection's own
    /// setting bounds them and `work` runs as it is. Behind a transaction pooler, where a
    /// session setting would not last, it runs in a transaction of its own opened with the
    /// bound as a `SET LOCAL`, the three pipelined in one round trip; a statement that fails
    /// makes the `COMMIT` a rollback, and a run dropped midway closes its connection.
    pub(crate) async fn lock_bounded<T>(
        &self,
        work: impl AsyncFnOnce(&tokio_postgres::Client) -> std::result::Result<T, tokio_postgres::Error>,
    ) -> Result<T> {
        let client = self.client().await?;
        let Some(begin) = &self.inner.local_lock_bound else {
            return work(&**client).await.map_err(map_pg);
        };
        let client = TxConnection::new(client);
        let done = bracketed(&client, (begin, "COMMIT"), work(&***client)).await?;
        client.release();
        done.map_err(map_pg)
    }
}

/// What is sent before and after statements that run with a generic plan: the session
/// setting [`GENERIC_PLAN_ON`] and [`GENERIC_PLAN_OFF`], so that the statements run on
/// their own (their row locks end with each); or, behind a transaction pooler, where a
/// session setting would stay with whichever server session ran it, a transaction whose
/// `SET LOCAL` ends at its `COMMIT`. A failed statement then rolls back the others of the
/// transaction, which the caller's retry writes again.
pub(crate) fn generic_plan_brackets(pooler: Pooler) -> (&'static str, &'static str) {
    match pooler {
        Pooler::None => (GENERIC_PLAN_ON, GENERIC_PLAN_OFF),
        Pooler::Transaction => (GENERIC_PLAN_LOCAL, "COMMIT"),
    }
}

/// [`GENERIC_PLAN_ON`] for one transaction.
const GENERIC_PLAN_LOCAL: &str = "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan";
