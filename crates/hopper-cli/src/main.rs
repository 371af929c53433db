//! The `hopper` binary: migrations, the admin CLI, the demo and the benchmarks.

mod admin;
mod bench;
mod cli;
mod demo;
mod http;
mod nodes;
mod open_files;
mod outage;
mod output;
mod prune;
mod queues;
mod schema;
mod serve;
mod telemetry;
mod watch;
mod worker;

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use hopper::backend::Backend;
use hopper::{ConnectOptions, PgOptions, SqliteOptions};

use cli::{Cli, Command};

/// jemalloc, not the system's allocator, with the `jemalloc` feature: see the feature's note
/// in Cargo.toml for why.
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let _telemetry = telemetry::init(output::colour_stderr());
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    let json = cli.json;
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if output::is_broken_pipe(&e) => ExitCode::from(output::BROKEN_PIPE_EXIT),
        Err(e) => {
            let message = output::one_line(&e);
            if json {
                // Best effort: stdout may be the thing that failed.
                let _ =
                    output::write_stdout(format_args!("{}\n", output::error_json(&e, &message)));
            } else {
                eprintln!("error: {}", output::printable(&message));
            }
            ExitCode::FAILURE
        }
    }
}

/// A command line clap refused: its own message (help and version too), or under
/// `--json` a JSON error object on stdout; status 2 either way, 0 for help and version.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let json = std::env::args_os().any(|a| a == "--json");
    if json && !matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let message = usage_message(&e.to_string());
        let body = serde_json::json!({ "error": { "code": "usage", "message": message } });
        let _ = output::write_stdout(format_args!("{body}\n"));
        return ExitCode::from(2);
    }
    let _ = e.print();
    ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2))
}

/// clap's message on one line: every line of it (the arguments missing, a tip) up to the
/// usage and help footer, without its `error: `.
fn usage_message(rendered: &str) -> String {
    let lines: Vec<&str> = rendered
        .lines()
        .take_while(|line| !line.starts_with("Usage:") && !line.starts_with("For more"))
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    let message = lines.join(" ");
    message
        .strip_prefix("error: ")
        .unwrap_or(&message)
        .to_owned()
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let (url, json) = (cli.database_url.as_deref(), cli.json);
    let schema = cli.schema.as_str();
    let mut pg = PgOptions::default()
        .with_schema(schema)
        .with_pooler(cli.pooler);
    pg.direct_url = cli.direct_url.clone();
    // The admin commands wait for a held lock only so long: an admin's cancel of a job an
    // application holds says why it cannot go on, rather than hanging.
    let lock_timeout = admin::parse_duration("--lock-timeout", &cli.lock_timeout)
        .map_err(output::invalid_input)?;
    let admin_pg = pg.clone().with_lock_timeout(lock_timeout);
    let open_admin = |url| open(url, admin_pg.clone(), Missing::Refuse);
    // Only the commands that migrate create a missing SQLite file; the others need a
    // migrated database and say so, leaving no empty file behind a mistyped path.
    let open_creating = |url| open(url, pg.clone(), Missing::Create);
    let open = |url| open(url, pg.clone(), Missing::Refuse);
    // The long-running commands wait for a database that is starting or restarting.
    let open_patiently = |url| {
        outage::retry_if("opening the database", outage::is_transient, move || {
            open(url)
        })
    };
    // `serve` installs its own, with Prometheus inside when it serves `/metrics`.
    if !matches!(cli.command, Command::Serve(_)) {
        telemetry::install_recorder(None)?;
    }
    match cli.command {
        Command::Migrate => admin::migrate(&open_creating(url).await?, schema, json).await,
        Command::Enqueue(args) => {
            // Bad input is refused before connecting, so it never writes anything.
            let job = admin::new_job(&args).map_err(output::invalid_input)?;
            admin::enqueue(&open_admin(url).await?, job, json).await
        }
        Command::Jobs(cmd) => {
            let action = admin::JobsAction::parse(cmd).map_err(output::invalid_input)?;
            admin::jobs(&open_admin(url).await?, action, json).await
        }
        Command::Stats(args) if args.watch => {
            let interval = admin::parse_duration("--interval", &args.interval)
                .map_err(output::invalid_input)?;
            watch::run(&open_patiently(url).await?, interval, json).await
        }
        Command::Stats(_) => admin::stats(&open_admin(url).await?, json).await,
        Command::Queues(cmd) => {
            let action = queues::QueuesAction::parse(cmd).map_err(output::invalid_input)?;
            queues::queues(&open_admin(url).await?, action, json).await
        }
        Command::Cron(cmd) => queues::cron(&open_admin(url).await?, cmd, json).await,
        Command::Nodes(args) => {
            let params = nodes::params(&args).map_err(output::invalid_input)?;
            nodes::nodes(&open_admin(url).await?, &params, json).await
        }
        Command::Demo(args) => demo::run(open_creating(url).await?, args, json).await,
        Command::Bench(args) => {
            let backend = open_patiently(url).await?;
            schema::refuse_newer(&backend).await?;
            bench::run(backend, args, json).await
        }
        Command::Serve(args) => serve::run(configured_or_embedded(url), pg.clone(), args).await,
        Command::Worker(args) => {
            let backend = open_patiently(url).await?;
            schema::refuse_newer(&backend).await?;
            worker::run(backend, args).await
        }
    }
}

/// The database used when none is configured: an embedded SQLite file in the current
/// directory, so hopper runs on a machine with no database server.
const DEFAULT_DATABASE_URL: &str = "sqlite://hopper.db";

/// What opening a SQLite file that does not exist does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Missing {
    /// Creates it: the commands that migrate (`migrate`, `demo`, `serve`).
    Create,
    /// Refuses it, creating nothing, with an error naming the file: every other command
    /// needs a database migrated before.
    Refuse,
}

/// The options of every backend from the command line's PostgreSQL options: for SQLite,
/// `--schema` is the table prefix, the pool size the most reader connections, and
/// `missing` what becomes of a file that does not exist.
fn connect_options(pg: PgOptions, missing: Missing) -> ConnectOptions {
    let sqlite = SqliteOptions::default()
        .with_prefix(&pg.schema)
        .with_readers(pg.pool_size.max(1))
        .with_create_if_missing(missing == Missing::Create);
    ConnectOptions::default()
        .with_sqlite(sqlite)
        .with_postgres(pg)
}

/// The configured database (`DATABASE_URL` / `--database-url`), or the embedded SQLite
/// default, said in one line on stderr.
fn configured_or_embedded(url: Option<&str>) -> &str {
    url.unwrap_or_else(|| {
        eprintln!(
            "hopper: no DATABASE_URL set; using the embedded SQLite database {DEFAULT_DATABASE_URL} (set DATABASE_URL=postgres://… for PostgreSQL)"
        );
        DEFAULT_DATABASE_URL
    })
}

/// Connects to the configured database (`DATABASE_URL` / `--database-url`) with `options`
/// (schema, pooler), or to the embedded SQLite default, said in one line on stderr.
async fn open(
    url: Option<&str>,
    options: PgOptions,
    missing: Missing,
) -> anyhow::Result<Arc<dyn Backend>> {
    let url = configured_or_embedded(url);
    let what = match url.split_once('?') {
        // A `hopper serve` endpoint, named without its token.
        _ if !url.starts_with("tcp://") => "cannot open the database".to_owned(),
        Some((endpoint, _)) => format!("cannot reach the hopper server at {endpoint}"),
        None => format!("cannot reach the hopper server at {url}"),
    };
    hopper::connect(url, connect_options(options, missing))
        .await
        .map_err(|e| anyhow::Error::new(e).context(what))
}
