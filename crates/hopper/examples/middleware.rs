//! Middleware around enqueue and execution (`hopper::middleware`): an audit trail of
//! enqueues, arguments sealed before they are stored and opened only for the worker, and
//! an error reporter that sees every failed attempt (where a Sentry client would go).
//! Runs on an in-memory SQLite store:
//!
//! ```sh
//! cargo run -p hopper --example middleware
//! ```

use std::sync::Arc;
use std::time::Duration;

use hopper::middleware::{Middleware, Next};
use hopper::{
    Client, JobArgs, JobContext, JobError, NewJob, Runtime, RuntimeConfig, SqliteBackend,
    SqliteOptions, Worker, Workers,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::mpsc;

#[derive(Serialize, Deserialize)]
struct Charge {
    card: String,
    cents: u64,
}

impl JobArgs for Charge {
    const KIND: &'static str = "charge";
}

/// Charges cards; refuses amounts over 1,000.00.
struct Biller(mpsc::UnboundedSender<()>);

#[async_trait::async_trait]
impl Worker for Biller {
    type Args = Charge;

    async fn process(&self, _ctx: &JobContext, args: Charge) -> Result<(), JobError> {
        let _ = self.0.send(());
        if args.cents > 100_000 {
            return Err(JobError::permanent(format!(
                "{} cents is over the limit",
                args.cents
            )));
        }
        println!("charged {} cents to card {}", args.cents, args.card);
        Ok(())
    }
}

/// Logs who enqueued what (here, to stdout), and records a user in each job's meta.
struct Audit {
    user: &'static str,
}

#[async_trait::async_trait]
impl Middleware for Audit {
    async fn enqueue(&self, jobs: &mut [NewJob]) -> hopper::Result<()> {
        for job in jobs.iter() {
            println!("audit: {} enqueues {} {}", self.user, job.kind, job.id);
        }
        Ok(())
    }
}

/// Seals the arguments before they are stored and opens them for the worker. The "cipher"
/// is a stand-in (a reversal of the JSON text): use a real AEAD with a key you manage.
struct Sealed;

fn flip(text: &str) -> String {
    text.chars().rev().collect()
}

#[async_trait::async_trait]
impl Middleware for Sealed {
    async fn enqueue(&self, jobs: &mut [NewJob]) -> hopper::Result<()> {
        for job in jobs.iter_mut() {
            job.args = json!({ "sealed": flip(&job.args.to_string()) });
        }
        Ok(())
    }

    async fn execute(
        &self,
        _ctx: &JobContext,
        args: &Value,
        next: Next<'_>,
    ) -> Result<(), JobError> {
        let opened = args["sealed"]
            .as_str()
            .and_then(|sealed| serde_json::from_str::<Value>(&flip(sealed)).ok())
            .ok_or_else(|| JobError::permanent("the arguments are not sealed"))?;
        next.run(&opened).await
    }
}

/// Reports every failed attempt, with the job it belongs to.
struct ReportErrors;

#[async_trait::async_trait]
impl Middleware for ReportErrors {
    async fn execute(
        &self,
        ctx: &JobContext,
        args: &Value,
        next: Next<'_>,
    ) -> Result<(), JobError> {
        let result = next.run(args).await;
        if let Err(error) = &result {
            let job = ctx.job();
            eprintln!(
                "report: {} job {} attempt {} failed: {error}",
                job.kind, job.lease.job_id, job.lease.attempt
            );
        }
        result
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let backend = Arc::new(SqliteBackend::open_in_memory(SqliteOptions::default()).await?);
    let client = Client::new(backend.clone())
        .with_middleware(Audit { user: "ada" })
        .with_middleware(Sealed);
    client.migrate().await?;
    client
        .enqueue(&Charge {
            card: "4242".into(),
            cents: 1_250,
        })
        .await?;
    client
        .enqueue(&Charge {
            card: "4242".into(),
            cents: 250_000,
        })
        .await?;
    let stored = client
        .jobs(&hopper::JobListParams {
            limit: 10,
            ..Default::default()
        })
        .await?;
    for job in &stored {
        println!("stored args: {}", job.args);
    }

    let (ran, mut runs) = mpsc::unbounded_channel();
    let mut workers = Workers::new();
    // The reporter outermost, so it sees what the worker and the inner middleware answered.
    workers
        .register(Biller(ran))
        .middleware(ReportErrors)
        .middleware(Sealed);
    let config = RuntimeConfig::default().with_poll_interval(Duration::from_millis(50));
    let handle = Runtime::new(backend, workers, config).start().await?;
    for _ in 0..stored.len() {
        runs.recv().await;
    }
    handle.shutdown().await;
    Ok(())
}
