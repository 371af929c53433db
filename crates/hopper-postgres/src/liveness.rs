//! Node liveness on PostgreSQL ([`NodeLiveness`]): each node holds a session-level
//! advisory lock, keyed by its id, on a connection of its own. PostgreSQL releases the
//! lock the moment that session ends (the process died, or its connection did), and the
//! other nodes' rescuers find the node's registered key free (`node_release_vanished.sql`)
//! and release its jobs without waiting for their leases.
//!
//! The holder learns that its lock is gone when the connection ends or stops answering a
//! ping ([`PING_PERIOD`], [`PING_TIMEOUT`]); the runtime is then fenced until it holds the
//! lock again. On the server side the session asks for TCP keepalives, so a session whose
//! client vanished without closing its socket (a machine lost, a cable cut) ends within
//! about half a minute instead of the system's two hours, and for no idle timeout.
//!
//! Behind a pooler in transaction mode a session lock means nothing (the server session is
//! shared); such deployments turn the capability off ([`PgBackend::set_node_liveness`]) and rely on
//! heartbeats and leases.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::FutureExt;
use hopper_core::error::with_causes;
use hopper_core::limits::MAX_ERROR_HISTORY;
use hopper_core::{Error, NodeHold, NodeId, NodeInfo, NodeLiveness, Result};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_postgres::Client;

use crate::PgBackend;
use crate::error::map_pg;
use crate::hot::millis;

/// How often the holder checks that its lock connection still answers.
pub const PING_PERIOD: Duration = Duration::from_secs(1);

/// A ping unanswered this long means the connection is lost: the lock may be gone.
pub const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// Settings of the lock session: server-side keepalives (a silent client is noticed in
/// 10 + 3 × 5 s), no idle timeout on PostgreSQL 14 and later (the session is idle between
/// pings by design), and a registration that waits at most a second for the node's row
/// when another transaction holds it (an operator's `SELECT … FOR UPDATE`): the hold then
/// fails and is tried again with backoff, so a node retaking its lock sees its stop
/// between tries instead of waiting for the holder.
const SESSION_SETTINGS: &str = "SELECT set_config('tcp_keepalives_idle', '10', false), \
     set_config('tcp_keepalives_interval', '5', false), \
     set_config('tcp_keepalives_count', '3', false), \
     set_config('lock_timeout', '1s', false), \
     (SELECT set_config('idle_session_timeout', '0', false) \
      WHERE current_setting('server_version_num')::int >= 140000)";

/// Keeps the lock session open: dropping it stops the ping and closes the connection,
/// which releases the lock.
struct Guard {
    _client: Arc<Client>,
    ping: JoinHandle<()>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.ping.abort();
    }
}

#[async_trait]
impl NodeLiveness for PgBackend {
    async fn node_hold(&self, node: &NodeInfo) -> Result<NodeHold> {
        // The lock needs a session of its own on the server itself: the direct URL behind
        // a transaction pooler (`node_liveness` offers none when there is no such URL).
        let Some(direct) = &self.inner.listen else {
            return Err(Error::Unsupported(
                "node liveness behind a transaction pooler needs a direct URL".to_owned(),
            ));
        };
        let (client, connection) = direct.connect_raw().await?;
        let (lost_tx, mut lost_rx) = mpsc::channel::<String>(2);
        let ended = lost_tx.clone();
        tokio::spawn(async move {
            let why = match connection.await {
                Ok(()) => "the liveness connection was closed".to_owned(),
                Err(e) => format!("the liveness connection failed: {}", with_causes(&e)),
            };
            let _ = ended.try_send(why);
        });
        // Dropping the client on an error below closes the session, and with it any lock
        // the statement took.
        client
            .batch_execute(SESSION_SETTINGS)
            .await
            .map_err(map_pg)?;
        let now = self.inner.clock.now();
        let row = client
            .query_opt(
                self.inner.queries.node_hold.sql.as_str(),
                &[&node.id, &node.name, &node.queues, &node.concurrency, &now],
            )
            .await
            .map_err(map_pg)?;
        if row.is_none() {
            return Err(Error::Conflict(format!(
                "the liveness lock of node {} is held by another session (its own earlier \
                 session not yet ended, or a release of the node in progress)",
                node.id
            )));
        }
        let client = Arc::new(client);
        let ping = tokio::spawn(ping(client.clone(), lost_tx));
        let lost = async move {
            lost_rx
                .recv()
                .await
                .unwrap_or_else(|| "the liveness connection ended".to_owned())
        };
        Ok(NodeHold::new(
            lost.boxed(),
            Box::new(Guard {
                _client: client,
                ping,
            }),
        ))
    }

    async fn node_release_vanished(&self) -> Result<u64> {
        self.release_dead(Release::Vanished).await
    }

    async fn node_let_go(&self, node: NodeId) -> Result<()> {
        let client = self.client().await?;
        self.text(&self.inner.queries.node_let_go)
            .execute(&**client, &[&node])
            .await
            .map_err(map_pg)?;
        Ok(())
    }
}

/// Which nodes a release takes (`node_release_dead.sql`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Release {
    /// Nodes whose heartbeat is older than this.
    Silent(Duration),
    /// Registered holders whose liveness lock is free.
    Vanished,
    /// This node, stopping: what still runs under it (its row locked by the caller's
    /// transaction beforehand, node_deregister.sql).
    Stopping(NodeId),
}

impl PgBackend {
    /// Releases the running jobs of the nodes `which` names, a failed attempt each, and
    /// forgets each of those nodes unless a job of it was held by another transaction
    /// (`node_release_dead.sql`). Returns how many jobs.
    pub(crate) async fn release_dead(&self, which: Release) -> Result<u64> {
        let client = self.client().await?;
        self.release_on(&**client, which).await
    }

    /// [`PgBackend::release_dead`] on `client`, inside the caller's transaction if it has
    /// opened one.
    pub(crate) async fn release_on(
        &self,
        client: &impl tokio_postgres::GenericClient,
        which: Release,
    ) -> Result<u64> {
        let now = self.inner.clock.now();
        let (dead_after_ms, vanished, stopping) = match which {
            Release::Silent(after) => (millis(after), false, None),
            Release::Vanished => (0, true, None),
            Release::Stopping(node) => (0, false, Some(node)),
        };
        let row = self
            .text(&self.inner.queries.node_release_dead)
            .query_one(
                client,
                &[
                    &dead_after_ms,
                    &now,
                    &vanished,
                    &MAX_ERROR_HISTORY,
                    &stopping,
                ],
            )
            .await
            .map_err(map_pg)?;
        Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }
}

/// Pings the lock session every [`PING_PERIOD`]; reports the first failure or timeout.
async fn ping(client: Arc<Client>, lost: mpsc::Sender<String>) {
    loop {
        tokio::time::sleep(PING_PERIOD).await;
        let why = match tokio::time::timeout(PING_TIMEOUT, client.simple_query("")).await {
            Ok(Ok(_)) => continue,
            Ok(Err(e)) => format!("the liveness connection failed a ping: {}", with_causes(&e)),
            Err(_) => {
                format!("the liveness connection did not answer a ping within {PING_TIMEOUT:?}")
            }
        };
        let _ = lost.try_send(why);
        return;
    }
}
