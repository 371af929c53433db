//! The `hopper` binary: migrations, the admin CLI, the demo and the benchmarks.

mod admin;
mod bench;
mod cli;
mod demo;
mod http;
mod outage;
mod prune;
mod queues;
mod serve;
mod watch;
mod worker;

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
            eprintln!("error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, each cause once (a message that already ends
/// with its cause's text does not repeat it).
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let (url, schema, json) = (cli.database_url.as_deref(), cli.schema.as_str(), cli.json);
    match cli.command {
        Command::Migrate => admin::migrate(&open(url, schema).await?, schema, json).await,
        Command::Enqueue(args) => {
            // Bad input is refused before connecting, so it never writes anything.
            let job = admin::new_job(&args)?;
            admin::enqueue(&open(url, schema).await?, job, json).await
        }
        Command::Jobs(cmd) => {
            let action = admin::JobsAction::parse(cmd)?;
            admin::jobs(&open(url, schema).await?, action, json).await
        }
        Command::Stats(args) if args.watch => {
            let interval = admin::parse_duration("--interval", &args.interval)?;
            watch::run(&open(url, schema).await?, interval, json).await
        }
        Command::Stats(_) => admin::stats(&open(url, schema).await?, json).await,
        Command::Queues(cmd) => {
            let action = queues::QueuesAction::parse(cmd)?;
            queues::queues(&open(url, schema).await?, action, json).await
        }
        Command::Cron(cmd) => queues::cron(&open(url, schema).await?, cmd, json).await,
        Command::Demo(args) => demo::run(open(url, schema).await?, args, json).await,
        Command::Bench(args) => bench::run(open(url, schema).await?, args, json).await,
        Command::Serve(args) => serve::run(url, schema, args).await,
        Command::Worker(args) => worker::run(open(url, schema).await?, args).await,
    }
}

/// The database used when none is configured: an embedded SQLite file in the current
/// directory, so hopper runs on a machine with no database server.
const DEFAULT_DATABASE_URL: &str = "sqlite://hopper.db";

/// Connects to the configured database (`DATABASE_URL` / `--database-url`), or to the
/// embedded SQLite default, said in one line on stderr.
async fn open(url: Option<&str>, schema: &str) -> anyhow::Result<Arc<dyn Backend>> {
    let url = match url {
        Some(url) => url,
        None => {
            eprintln!(
                "hopper: no DATABASE_URL set; using the embedded SQLite database {DEFAULT_DATABASE_URL} (set DATABASE_URL=postgres://… for PostgreSQL)"
            );
            DEFAULT_DATABASE_URL
        }
    };
    let options = PgOptions {
        schema: schema.to_owned(),
        ..PgOptions::default()
    };
    hopper::connect(url, options)
        .await
        .map_err(|e| anyhow::Error::new(e).context("cannot open the database"))
}
