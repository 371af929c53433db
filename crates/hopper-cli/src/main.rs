//! The `hopper` binary: migrations, the admin CLI, the demo and the benchmarks.

mod admin;
mod bench;
mod cli;
mod demo;

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use hopper::{Backend, PgOptions};

use cli::{Cli, Command};

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HOPPER_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let backend = open(&cli).await?;
    match cli.command {
        Command::Migrate => admin::migrate(&backend, cli.json).await,
        Command::Enqueue(args) => admin::enqueue(&backend, args, cli.json).await,
        Command::Jobs(cmd) => admin::jobs(&backend, cmd, cli.json).await,
        Command::Stats => admin::stats(&backend, cli.json).await,
        Command::Demo(args) => demo::run(backend, args, cli.json).await,
        Command::Bench(args) => bench::run(backend, args, cli.json).await,
    }
}

/// Connects to the configured database.
async fn open(cli: &Cli) -> anyhow::Result<Arc<dyn Backend>> {
    let Some(url) = cli.database_url.as_deref() else {
        anyhow::bail!("no database: set DATABASE_URL or pass --database-url postgres://…");
    };
    let options = PgOptions {
        schema: cli.schema.clone(),
        ..PgOptions::default()
    };
    hopper::connect(url, options)
        .await
        .map_err(|e| anyhow::anyhow!("cannot open the database: {e}"))
}
