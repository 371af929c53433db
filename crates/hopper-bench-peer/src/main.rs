//! `hopper-bench-peer`: hopper behind the command-line contract of the side-by-side peer
//! benchmark (`bench-peers/harness.py`, described in its docstring), so the harness runs
//! hopper exactly as it runs the PostgreSQL limits and the other job queues.
//!
//! ```text
//! hopper-bench-peer setup                   migrate $DATABASE_URL
//! hopper-bench-peer bulk N BATCH            Client::insert_many (binary COPY), BATCH per call; "ELAPSED_S x"
//! hopper-bench-peer single N                one Client::insert at a time;                      "ELAPSED_S x"
//! hopper-bench-peer worker-drain CONC       "T0 <epoch ms>", then a Runtime until SIGTERM
//! hopper-bench-peer worker-latency CONC N   "READY" once started; after N jobs "LAT [ms, …]"
//! hopper-bench-peer enqueue-paced N RATE    N jobs one at a time at RATE/s, args {"n": i, "t": epoch ms}
//! ```
//!
//! Every job goes to the queue `default` with the kind `peer`; the handler does nothing
//! (W4's records how long after its `t` it started). `DATABASE_URL` names the database
//! (the harness sets it), `HOPPER_SCHEMA` the schema (default `hopper`, which
//! `bench/peer/adapter.json`'s SQL expects). Everything else is hopper's default.

mod enqueue;
mod worker;

use anyhow::{Context, bail};
use hopper::{Client, ConnectOptions, PgOptions};

const USAGE: &str = "usage: hopper-bench-peer setup | bulk N BATCH | single N | worker-drain CONC \
                     | worker-latency CONC N | enqueue-paced N RATE";

/// One command of the contract, with its numbers.
enum Command {
    Setup,
    Bulk { jobs: u64, batch: u64 },
    Single { jobs: u64 },
    Paced { jobs: u64, rate: u64 },
    Drain { concurrency: usize },
    Latency { concurrency: usize, jobs: u64 },
}

/// Reads the command line; bad input is refused before anything connects.
fn parse(args: &[String]) -> anyhow::Result<Command> {
    let command = args.first().map(String::as_str).unwrap_or_default();
    let number = |i: usize, name: &str| -> anyhow::Result<u64> {
        let Some(arg) = args.get(i) else {
            bail!("{command}: {name} missing\n{USAGE}")
        };
        arg.parse()
            .with_context(|| format!("{command}: {name} must be a whole number, not {arg:?}"))
    };
    let positive = |i: usize, name: &str| -> anyhow::Result<u64> {
        match number(i, name)? {
            0 => bail!("{command}: {name} must be at least 1"),
            n => Ok(n),
        }
    };
    let concurrency = || -> anyhow::Result<usize> {
        usize::try_from(positive(1, "CONC")?).context("CONC is too large")
    };
    Ok(match command {
        "setup" => Command::Setup,
        "bulk" => Command::Bulk {
            jobs: number(1, "N")?,
            batch: positive(2, "BATCH")?,
        },
        "single" => Command::Single {
            jobs: number(1, "N")?,
        },
        "enqueue-paced" => Command::Paced {
            jobs: number(1, "N")?,
            rate: positive(2, "RATE")?,
        },
        "worker-drain" => Command::Drain {
            concurrency: concurrency()?,
        },
        "worker-latency" => Command::Latency {
            concurrency: concurrency()?,
            jobs: number(2, "N")?,
        },
        _ => bail!("unknown command {command:?}\n{USAGE}"),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = parse(&args)?;
    let client = connect().await?;
    match command {
        Command::Setup => {
            client.migrate().await.context("migrating")?;
        }
        Command::Bulk { jobs, batch } => enqueue::bulk(&client, jobs, batch).await?,
        Command::Single { jobs } => enqueue::single(&client, jobs).await?,
        Command::Paced { jobs, rate } => enqueue::paced(&client, jobs, rate).await?,
        Command::Drain { concurrency } => worker::drain(&client, concurrency).await?,
        Command::Latency { concurrency, jobs } => {
            worker::latency(&client, concurrency, jobs).await?
        }
    }
    Ok(())
}

/// The client on `DATABASE_URL`, schema `HOPPER_SCHEMA` (default `hopper`).
async fn connect() -> anyhow::Result<Client> {
    let url = std::env::var("DATABASE_URL").context("DATABASE_URL is not set")?;
    let mut options = PgOptions::default();
    if let Ok(schema) = std::env::var("HOPPER_SCHEMA") {
        options.schema = schema;
    }
    let backend = hopper::connect(&url, ConnectOptions::default().with_postgres(options))
        .await
        .context("connecting to DATABASE_URL")?;
    Ok(Client::new(backend))
}

/// Milliseconds since the Unix epoch (with microseconds), the harness's `t`.
fn now_ms() -> f64 {
    chrono::Utc::now().timestamp_micros() as f64 / 1000.0
}
