//! The run's own database: created on the server of `--database-url`, dropped at the end.

use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;
use hopper::PgConnectOptions;
use hopper::testing::with_database;

/// A database created for one run.
#[derive(Debug)]
pub struct RunDatabase {
    /// Its name.
    pub name: String,
    /// A URL that connects to it.
    pub url: String,
    admin_url: String,
}

impl RunDatabase {
    /// Creates `hopper_<what>_<unix time>` next to the database of `admin_url`.
    pub async fn create(admin_url: &str, what: &str) -> anyhow::Result<Self> {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        let name = format!("hopper_{what}_{secs}_{}", std::process::id());
        let admin = connect(admin_url).await?;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .with_context(|| format!("creating the database {name}"))?;
        Ok(RunDatabase {
            url: with_database(admin_url, &name),
            name,
            admin_url: admin_url.to_owned(),
        })
    }

    /// Drops the database (closing whatever is still connected), or says it is kept.
    pub async fn finish(self, keep: bool) -> anyhow::Result<()> {
        if keep {
            eprintln!("kept the database {} ({})", self.name, self.url);
            return Ok(());
        }
        let admin = connect(&self.admin_url).await?;
        admin
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .await
            .with_context(|| format!("dropping the database {}", self.name))
    }
}

/// One connection, its driver spawned.
pub async fn connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let client = PgConnectOptions::parse(url)?
        .connect()
        .await
        .context("connecting to PostgreSQL")?;
    Ok(client)
}

/// A small pool on `url` that reconnects by itself (after a database restart).
pub fn pool(url: &str, size: usize) -> anyhow::Result<deadpool_postgres::Pool> {
    let options = PgConnectOptions::parse(url)?;
    let manager = deadpool_postgres::Manager::from_config(
        options.config().clone(),
        options.tls(),
        deadpool_postgres::ManagerConfig {
            recycling_method: deadpool_postgres::RecyclingMethod::Verified,
        },
    );
    deadpool_postgres::Pool::builder(manager)
        .max_size(size)
        .build()
        .context("building a connection pool")
}
