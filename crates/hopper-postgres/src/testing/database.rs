//! [`TestDatabase`]: a fresh PostgreSQL schema per test, migrated, dropped when the value
//! is dropped, so tests run in parallel without seeing each other's jobs.
//!
//! The database comes from `HOPPER_TEST_DATABASE_URL`, else `DATABASE_URL`, else
//! `postgres://postgres@127.0.0.1:5432/postgres`.

use std::sync::Arc;
use std::time::Duration;

use crate::{PgBackend, PgOptions, Pooler};
use hopper_core::{Backend, Clock, NodeInfo, QueueStats, Result, SystemClock};

use super::PgBouncer;

/// The URL tests connect to.
pub fn database_url() -> String {
    std::env::var("HOPPER_TEST_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// A migrated schema of its own, dropped on drop.
#[derive(Debug)]
pub struct TestDatabase {
    url: String,
    schema: String,
    backend: PgBackend,
    /// The database made for this test alone ([`TestDatabase::in_own_database`]); last,
    /// so that it is dropped after the backend's connections.
    own: Option<OwnDatabase>,
}

/// A database created on the server for one test, dropped on drop with whatever is still
/// connected to it.
#[derive(Debug)]
struct OwnDatabase {
    /// A URL of another database of the server, to drop this one from.
    admin_url: String,
    name: String,
}

impl OwnDatabase {
    async fn create(admin_url: &str) -> Result<Self> {
        let name = format!("hopper_test_{}", uuid::Uuid::now_v7().simple());
        let admin = crate::PgConnectOptions::parse(admin_url)?.connect().await?;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .map_err(hopper_core::Error::database)?;
        Ok(OwnDatabase {
            admin_url: admin_url.to_owned(),
            name,
        })
    }
}

impl Drop for OwnDatabase {
    fn drop(&mut self) {
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        cleanup(&self.admin_url, async move |client| {
            let _ = client.batch_execute(&drop).await;
        });
    }
}

/// `url` with its database replaced by `name` (query parameters kept).
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let server = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{server}/{name}?{query}"),
        None => format!("{server}/{name}"),
    }
}

impl TestDatabase {
    /// A fresh schema with the database's clock.
    pub async fn new() -> Result<Self> {
        Self::with_clock(Arc::new(SystemClock)).await
    }

    /// A fresh schema whose backend uses `clock` for "now".
    pub async fn with_clock(clock: Arc<dyn Clock>) -> Result<Self> {
        Self::on(database_url(), clock, None).await
    }

    /// A fresh schema in a database of its own, created on the server of
    /// [`database_url`] and dropped on drop (ending whatever is still connected to it):
    /// for tests that other work on the same database would upset, such as a vacuum,
    /// which removes dead rows only when no transaction of the database is older than them.
    pub async fn in_own_database() -> Result<Self> {
        let admin_url = database_url();
        let own = OwnDatabase::create(&admin_url).await?;
        let url = with_database(&admin_url, &own.name);
        Self::on(url, Arc::new(SystemClock), Some(own)).await
    }

    async fn on(url: String, clock: Arc<dyn Clock>, own: Option<OwnDatabase>) -> Result<Self> {
        let schema = format!("test_{}", uuid::Uuid::now_v7().simple());
        let backend = PgBackend::connect(
            &url,
            PgOptions::default()
                .with_schema(&schema)
                .with_pool_size(16)
                .with_clock(clock),
        )
        .await?;
        backend.migrate().await?;
        Ok(TestDatabase {
            url,
            schema,
            backend,
            own,
        })
    }

    /// Another backend on the same schema (for example with another clock).
    pub async fn backend_with_clock(&self, clock: Arc<dyn Clock>) -> Result<PgBackend> {
        PgBackend::connect(
            &self.url,
            PgOptions::default()
                .with_schema(&self.schema)
                .with_pool_size(16)
                .with_clock(clock),
        )
        .await
    }

    /// Another backend on the same schema, reached through `bouncer` (a pooler in
    /// transaction mode: [`Pooler::Transaction`]), with `direct` as its direct URL for
    /// LISTEN (`None`: it polls), and `clock` for "now".
    pub async fn behind(
        &self,
        bouncer: &PgBouncer,
        direct: Option<&str>,
        clock: Arc<dyn Clock>,
    ) -> Result<PgBackend> {
        let mut options = PgOptions::default()
            .with_schema(&self.schema)
            .with_pool_size(16)
            .with_clock(clock)
            .with_pooler(Pooler::Transaction);
        options.direct_url = direct.map(str::to_owned);
        PgBackend::connect(bouncer.url(), options).await
    }

    /// The schema's name.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The database URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The backend, as the runtime takes it.
    pub fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(self.backend.clone())
    }

    /// The PostgreSQL backend itself.
    pub fn pg(&self) -> &PgBackend {
        &self.backend
    }

    /// Registers a node of each name (a fresh id, queue `default`, concurrency 1), as a
    /// runtime's first heartbeat does, for tests of what lists nodes; returns them in order.
    pub async fn register_nodes(
        &self,
        names: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<Vec<NodeInfo>> {
        let mut nodes = Vec::new();
        for name in names {
            let node = NodeInfo {
                id: uuid::Uuid::now_v7(),
                name: name.into(),
                queues: vec![hopper_core::DEFAULT_QUEUE.to_owned()],
                concurrency: 1,
            };
            self.backend.node_heartbeat(&node).await?;
            nodes.push(node);
        }
        Ok(nodes)
    }

    /// Counts of one queue (zeros if it has no jobs).
    pub async fn queue_stats(&self, queue: &str) -> Result<QueueStats> {
        let stats = self.backend.queue_stats().await?;
        Ok(stats
            .into_iter()
            .find(|s| s.queue == queue)
            .unwrap_or_else(|| QueueStats {
                queue: queue.to_owned(),
                ..QueueStats::default()
            }))
    }

    /// Waits until `done` holds for the queue's counts, checking every 10 ms, or fails
    /// with [`Error::Timeout`](hopper_core::Error::Timeout) after `limit`, naming the last counts.
    pub async fn wait_for(
        &self,
        queue: &str,
        limit: Duration,
        done: impl Fn(&QueueStats) -> bool,
    ) -> Result<QueueStats> {
        let start = tokio::time::Instant::now();
        loop {
            let stats = self.queue_stats(queue).await?;
            if done(&stats) {
                return Ok(stats);
            }
            if start.elapsed() > limit {
                return Err(hopper_core::Error::Timeout(format!(
                    "condition not met within {limit:?}; last counts {stats:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits until no other session runs a statement on this schema, at most `limit`.
    ///
    /// A process killed mid-statement leaves its statement running: PostgreSQL finishes it
    /// (and commits it) before it notices the client is gone. A test that reads the state a
    /// killed process left behind waits for those first.
    pub async fn settle(&self, limit: Duration) -> std::result::Result<(), String> {
        let (client, conn) = crate::PgConnectOptions::parse(&self.url)
            .map_err(|e| e.to_string())?
            .connect_raw()
            .await
            .map_err(|e| e.to_string())?;
        let conn = tokio::spawn(conn);
        let pattern = format!("%{}.%", self.schema);
        let start = tokio::time::Instant::now();
        let result = loop {
            let busy: i64 = match client
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE pid <> pg_backend_pid() AND state <> 'idle' AND query LIKE $1",
                    &[&pattern],
                )
                .await
            {
                Ok(row) => row.get(0),
                Err(e) => break Err(e.to_string()),
            };
            if busy == 0 {
                break Ok(());
            }
            if start.elapsed() > limit {
                break Err(format!(
                    "{busy} sessions still busy on {} after {limit:?}",
                    self.schema
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        drop(client);
        let _ = conn.await;
        result
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        // A database of its own goes whole, after the backend (`own`'s drop).
        if self.own.is_none() {
            drop_schema(&self.url, &self.schema);
        }
    }
}

/// Drops `schema` of the database at `url` now, from synchronous code (a `Drop`), ending
/// any session that still holds a lock in it. For tests that create schemas of their own;
/// [`TestDatabase`] does this for its schema. Errors are ignored: it is cleanup.
pub fn drop_schema(url: &str, schema: &str) {
    let schema = schema.to_owned();
    cleanup(url, async move |client| {
        drop_schema_on(&client, &schema).await
    });
}

/// Runs `work` on a connection to `url` now, from synchronous code (a `Drop`), and waits
/// for it. Errors are ignored: it is cleanup.
fn cleanup(url: &str, work: impl AsyncFnOnce(tokio_postgres::Client) + Send + 'static) {
    let url = url.to_owned();
    // Drop runs outside async; a short-lived thread with its own runtime does the work.
    let _ = std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            let Ok(options) = crate::PgConnectOptions::parse(&url) else {
                return;
            };
            if let Ok((client, conn)) = options.connect_raw().await {
                tokio::spawn(conn);
                work(client).await;
            }
        });
    })
    .join();
}

/// Drops `schema`, ending any session that still holds a lock in it.
///
/// `Drop` blocks the thread it runs on. On a current-thread runtime that thread also drives
/// the test's own connections, so a transaction the test left open (an early return or a
/// failed assertion, or an error path whose `ROLLBACK` is only queued) can never finish, and
/// a plain `DROP SCHEMA` would wait for its lock forever. Those sessions belong to the
/// finished test; they are terminated.
async fn drop_schema_on(client: &tokio_postgres::Client, schema: &str) {
    let _ = client.batch_execute("SET lock_timeout = '1s'").await;
    for _ in 0..10 {
        let dropped = client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await;
        if dropped.is_ok() {
            return;
        }
        let _ = client
            .execute(
                "SELECT pg_terminate_backend(l.pid)
                 FROM pg_locks AS l
                 WHERE l.pid <> pg_backend_pid()
                   AND (l.relation IN (SELECT c.oid
                                       FROM pg_class AS c
                                       JOIN pg_namespace AS n ON n.oid = c.relnamespace
                                       WHERE n.nspname = $1)
                        OR (l.classid = 'pg_namespace'::regclass
                            AND l.objid = (SELECT oid FROM pg_namespace WHERE nspname = $1)))",
                &[&schema],
            )
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn replaces_the_database_and_keeps_the_rest() {
        assert_eq!(
            with_database("postgres://u@h:5432/postgres", "x"),
            "postgres://u@h:5432/x"
        );
        assert_eq!(
            with_database("postgres://u@h:5432/db?sslmode=disable", "x"),
            "postgres://u@h:5432/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://u@h", "x"), "postgres://u@h/x");
    }
}
