//! The schema after every migration, as `pg_dump --schema-only` prints it, is committed in
//! `schema.sql` beside this crate, so a schema change reviews as a diff (graphile/worker
//! does the same). This test fails when the migrations and the snapshot disagree; run it
//! with `HOPPER_BLESS=1` to rewrite the snapshot.

use std::process::Command;

use hopper_core::Backend;
use hopper_postgres::{PgBackend, PgOptions};

fn database_url() -> String {
    std::env::var("HOPPER_TEST_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// Keeps the lines that describe the schema, with the test schema's name put back to
/// `hopper` and pg_dump's session settings and comments left out.
fn normalize(dump: &str, schema: &str) -> String {
    dump.lines()
        .filter(|l| {
            !l.starts_with("--")
                && !l.starts_with("SET ")
                && !l.starts_with("SELECT pg_catalog.set_config")
        })
        .filter(|l| !l.starts_with("\\restrict") && !l.starts_with("\\unrestrict"))
        .map(|l| {
            l.replace(&format!("{schema}."), "hopper.")
                .replace(&format!("{schema}_wake"), "hopper_wake")
        })
        .map(|l| {
            if l == format!("CREATE SCHEMA {schema};") {
                "CREATE SCHEMA hopper;".to_owned()
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        .split("\n\n\n")
        .collect::<Vec<_>>()
        .join("\n\n")
        .trim()
        .to_owned()
        + "\n"
}

#[tokio::test]
async fn migrations_match_the_committed_snapshot() -> Result<(), Box<dyn std::error::Error>> {
    let url = database_url();
    let schema = format!("snap_{}", uuid::Uuid::now_v7().simple());
    let backend = PgBackend::connect(&url, PgOptions::default().with_schema(&schema)).await?;
    backend.migrate().await?;
    let output = Command::new("pg_dump")
        .args([
            "--schema-only",
            "--no-owner",
            "--no-privileges",
            "-n",
            &schema,
            &url,
        ])
        .output();
    let drop_schema = async {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await?;
        tokio::spawn(conn);
        client
            .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
            .await
    };
    drop_schema.await?;
    let output = output?;
    assert!(
        output.status.success(),
        "pg_dump failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let actual = normalize(&String::from_utf8(output.stdout)?, &schema);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/schema.sql");
    if std::env::var_os("HOPPER_BLESS").is_some() {
        std::fs::write(path, &actual)?;
        return Ok(());
    }
    let expected = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        expected == actual,
        "the schema differs from crates/hopper-postgres/schema.sql; review the change and rerun with HOPPER_BLESS=1 to update it.\n--- actual ---\n{actual}"
    );
    Ok(())
}
