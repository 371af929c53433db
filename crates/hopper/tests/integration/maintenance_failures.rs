//! The maintenance services' one error rule, on the real database: an error that waiting
//! will not cure (here the job or node table renamed away in the test's own schema) ends
//! the service's run; its supervisor restarts it with backoff, counts each failure, and
//! after five in a row gives up: the process's health turns unhealthy, naming the service
//! and the database's own words. The same for a privilege the role lacks (SQLSTATE class
//! 42), which no wait cures either. (Transient errors, a restart of PostgreSQL, are ridden
//! out: `hopper-cli`'s `db_restart` tests run every service of `hopper serve` through one.)

use std::sync::Arc;
use std::time::Duration;

use hopper::Health;
use hopper::backend::{Backend, NodeInfo};
use hopper::maintenance::{
    Beat, Heartbeat, HeartbeatConfig, Housekeeping, Pruner, Rescuer, RescuerConfig, Service,
    Services, Vacuumer,
};
use hopper::testing::TestDatabase;
use tokio_util::sync::CancellationToken;

/// Every 10 ms, so that each run reaches the database at once.
const OFTEN: Duration = Duration::from_millis(10);

/// Renames `table` of the test's schema away.
async fn rename_away(db: &TestDatabase, table: &str) -> anyhow::Result<()> {
    let (client, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    client
        .batch_execute(&format!(
            "ALTER TABLE {}.{table} RENAME TO {table}_gone",
            db.schema()
        ))
        .await?;
    Ok(())
}

/// Runs `service` alone under supervision, its table gone, and checks that it gives up
/// and says why.
async fn gives_up<S: Service>(db: &TestDatabase, table: &str, service: S) -> anyhow::Result<()> {
    let name = service.name();
    rename_away(db, table).await?;
    let health = Health::new();
    let services = Services::new(&health, CancellationToken::new());
    services.start(service);
    // Five runs with backoff (0.1 + 0.2 + 0.4 + 0.8 s) between them.
    let failure = tokio::time::timeout(Duration::from_secs(30), health.failed())
        .await
        .map_err(|_| anyhow::anyhow!("{name}: still healthy after 30 s on a missing table"))?;
    services.stop().await;
    assert_eq!(health.failed_task(), Some(name), "{failure}");
    assert!(failure.contains(name), "{failure}");
    assert!(
        failure.contains("does not exist"),
        "the database's words: {failure}"
    );
    assert_eq!(health.task_failures(), 5, "each failure counted: {failure}");
    Ok(())
}

fn housekeeping() -> Housekeeping {
    Housekeeping::default()
        .with_prune_interval(Some(OFTEN))
        .with_vacuum_interval(Some(OFTEN))
}

#[tokio::test]
async fn a_pruner_without_its_table_gives_up_and_says_why() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    gives_up(&db, "jobs", Pruner::new(db.backend(), housekeeping())).await
}

#[tokio::test]
async fn a_rescuer_without_its_table_gives_up_and_says_why() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let config = RescuerConfig::new(OFTEN, Duration::from_secs(30));
    gives_up(&db, "jobs", Rescuer::new(db.backend(), config)).await
}

#[tokio::test]
async fn a_vacuumer_without_its_table_gives_up_and_says_why() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    gives_up(&db, "jobs", Vacuumer::new(db.backend(), housekeeping())).await
}

/// A node's heartbeat: its node row.
struct NodeRow {
    backend: Arc<dyn Backend>,
    node: NodeInfo,
}

#[async_trait::async_trait]
impl Beat for NodeRow {
    async fn beat(&self) -> hopper::Result<()> {
        self.backend.node_heartbeat(&self.node).await
    }
}

#[tokio::test]
async fn a_heartbeat_without_its_table_gives_up_and_says_why() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let beat = NodeRow {
        backend: db.backend(),
        node: NodeInfo {
            id: uuid::Uuid::now_v7(),
            name: "beating".into(),
            queues: vec!["default".into()],
            concurrency: 1,
        },
    };
    beat.beat().await?;
    let heartbeat = Heartbeat::new(Arc::new(beat), HeartbeatConfig::new(OFTEN));
    gives_up(&db, "nodes", heartbeat).await
}

/// A role of the test's own that may read and write the schema's tables but not delete
/// from them; dropped again with [`drop_role`].
async fn role_without_delete(db: &TestDatabase) -> anyhow::Result<String> {
    let role = format!("hopper_nodelete_{}", uuid::Uuid::now_v7().simple());
    let (client, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let schema = db.schema();
    client
        .batch_execute(&format!(
            "CREATE ROLE {role} NOLOGIN;
             GRANT USAGE ON SCHEMA {schema} TO {role};
             GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA {schema} TO {role};
             GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {role};
             GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO {role};"
        ))
        .await?;
    Ok(role)
}

async fn drop_role(db: &TestDatabase, role: &str) -> anyhow::Result<()> {
    let (client, connection) = tokio_postgres::connect(db.url(), tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    client
        .batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await?;
    Ok(())
}

#[tokio::test]
async fn a_pruner_whose_role_may_not_delete_gives_up_and_says_why() -> anyhow::Result<()> {
    let db = TestDatabase::new().await?;
    let role = role_without_delete(&db).await?;
    // The session acts as the role (`SET ROLE` at connect time): the privilege is checked.
    let separator = if db.url().contains('?') { '&' } else { '?' };
    let url = format!("{}{separator}options=-c%20role%3D{role}", db.url());
    let options = hopper::PgOptions::default().with_schema(db.schema());
    let backend: Arc<dyn Backend> = Arc::new(hopper::PgBackend::connect(&url, options).await?);
    let health = Health::new();
    let services = Services::new(&health, CancellationToken::new());
    services.start(Pruner::new(backend, housekeeping()));
    let failure = tokio::time::timeout(Duration::from_secs(30), health.failed()).await;
    services.stop().await;
    drop_role(&db, &role).await?;
    let failure =
        failure.map_err(|_| anyhow::anyhow!("still healthy after 30 s without DELETE"))?;
    assert_eq!(health.failed_task(), Some("pruner"), "{failure}");
    assert!(failure.contains("permission denied"), "{failure}");
    assert_eq!(health.task_failures(), 5, "each failure counted: {failure}");
    Ok(())
}
