//! The dashboard with live traffic: a runtime working a few queues, a producer enqueueing
//! a job every ~100 ms (some fail, some retry), and the web side on 127.0.0.1:7011.
//!
//! ```sh
//! cargo run -p hopper-web --example dashboard            # open on loopback
//! HOPPER_HTTP_ADMIN_TOKENS=$(openssl rand -hex 24) cargo run -p hopper-web --example dashboard
//! ```
//!
//! Jobs live in the schema `hopper_web_demo` of `DATABASE_URL` (default: the local
//! PostgreSQL), which is cleared (and its queues resumed) at start.

use std::time::Duration;

use hopper::{
    Client, JobArgs, JobContext, JobError, NewJob, PgOptions, Priority, Runtime, RuntimeConfig,
    Worker, Workers,
};
use hopper_web::{AuthConfig, WebState};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Work {
    /// How long the job takes, in milliseconds.
    ms: u64,
    /// 0–99: below 8 the attempt fails (retried), below 2 it fails for good.
    luck: u64,
}

impl JobArgs for Work {
    const KIND: &'static str = "work";
}

struct Worky;

#[async_trait::async_trait]
impl Worker for Worky {
    type Args = Work;
    async fn process(&self, ctx: &JobContext, args: Work) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_millis(args.ms)).await;
        match args.luck {
            0..2 => Err(JobError::Permanent("the input was malformed".into())),
            2..8 if ctx.attempt() < 3 => Err(JobError::retry_after(
                format!("upstream timed out (attempt {})", ctx.attempt()),
                Duration::from_secs(2),
            )),
            _ => Ok(()),
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let prometheus = hopper_web::metrics::install_recorder()?;
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
    let options = PgOptions::default().with_schema("hopper_web_demo");
    let options = hopper::ConnectOptions::default().with_postgres(options);
    let client = Client::new(hopper::connect(&url, options).await?);
    client.migrate().await?;
    client.clear(None).await?;

    let queues = ["default", "mail", "images"];
    for queue in queues {
        // A queue paused from the dashboard in an earlier run starts resumed.
        client.resume(queue).await?;
    }
    let mut workers = Workers::new();
    workers.register(Worky);
    let runtime = Runtime::new(
        client.backend().clone(),
        workers,
        RuntimeConfig::default()
            .with_queues(queues)
            .with_concurrency(8),
    )
    .start()
    .await?;

    let producer = client.clone();
    tokio::spawn(async move {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        loop {
            // xorshift: enough randomness for a demo, no dependency.
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let args = Work {
                ms: 20 + seed % 400,
                luck: (seed >> 20) % 100,
            };
            let job = NewJob::of(&args).map(|j| {
                j.with_queue(queues[(seed >> 40) as usize % queues.len()])
                    .with_priority(Priority(((seed >> 50) % 3) as i16 + 1))
            });
            if let Ok(job) = job
                && let Err(e) = producer.insert(job).await
            {
                tracing::warn!(error = %e, "enqueue failed");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });

    let auth = if std::env::var_os(hopper_web::auth::ENV_ADMIN_TOKENS).is_some() {
        AuthConfig::from_env()?
    } else {
        AuthConfig::open()
    };
    let state = WebState::new(client.backend().clone(), auth).with_prometheus(prometheus);
    let addr = "127.0.0.1:7011".parse()?;
    hopper_web::serve_with_shutdown(addr, state, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    runtime.shutdown().await;
    Ok(())
}
