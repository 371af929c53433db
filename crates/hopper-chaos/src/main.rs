//! `hopper-chaos`: the reliability harness of hopper (`docs/reliability.md`).
//!
//! - `chaos`: jobs run by direct and remote worker processes that are SIGKILLed at random,
//!   with `hopper serve` killed too, PostgreSQL restarted once and a faulty TCP proxy
//!   between remote workers and the server; then a report of lost, double-completed and
//!   unexplained extra executions. Exits non-zero if any is not zero.
//! - `pinned-xmin`: a steady load while a REPEATABLE READ transaction pins the xmin horizon.
//! - `soak`: a steady load for a long time; throughput drift and table sizes.
//!
//! Each run creates a database of its own on the server of `--database-url` and drops it
//! at the end (unless `--keep`).

mod chaos;
mod db;
mod enqueue;
mod holder;
mod load;
mod pinned;
mod processes;
mod proxy;
mod report;
mod soak;
mod worker;

use clap::{Parser, Subcommand};

/// The command line.
#[derive(Debug, Parser)]
#[command(name = "hopper-chaos", about = "Reliability harness for hopper")]
struct Cli {
    /// The PostgreSQL server (any database on it: the run creates its own).
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/postgres",
        hide_env_values = true,
        global = true
    )]
    database_url: String,
    /// Keep the run's database at the end (for inspection).
    #[arg(long, global = true)]
    keep: bool,
    #[command(subcommand)]
    command: Command,
}

/// What to run.
#[derive(Debug, Subcommand)]
enum Command {
    /// Kills, a database restart and a faulty network while jobs run; then the report.
    Chaos(chaos::ChaosArgs),
    /// A steady load with the xmin horizon pinned by an open snapshot, then released.
    PinnedXmin(pinned::PinnedArgs),
    /// A steady load for a long time: throughput drift, table and index sizes.
    Soak(soak::SoakArgs),
    /// Internal: one worker process of a chaos run.
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HOPPER_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,deadpool=error")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("hopper-chaos: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Chaos(args) => chaos::run(&cli.database_url, cli.keep, args).await,
            Command::PinnedXmin(args) => pinned::run(&cli.database_url, cli.keep, args).await,
            Command::Soak(args) => soak::run(&cli.database_url, cli.keep, args).await,
            Command::Worker(args) => worker::run(args).await.map(|()| true),
        }
    });
    match result {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("hopper-chaos: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
