//! A worker that runs through a `hopper serve` server instead of the database: the same
//! `Worker` trait and `Runtime`, only the URL differs.
//!
//! ```sh
//! hopper serve --listen tcp://127.0.0.1:7010          # prints where its token is
//! HOPPER_TOKEN=$(grep -v '^#' ~/.config/hopper/serve.token) \
//!     cargo run -p hopper --example remote_worker -- tcp://127.0.0.1:7010
//! hopper enqueue --kind greet --args '{"name": "world"}'
//! ```

use hopper::{JobArgs, JobContext, JobError, Runtime, RuntimeConfig, Worker, Workers};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Greet {
    name: String,
}

impl JobArgs for Greet {
    const KIND: &'static str = "greet";
}

struct Greeter;

#[async_trait::async_trait]
impl Worker for Greeter {
    type Args = Greet;

    async fn process(&self, ctx: &JobContext, args: Greet) -> Result<(), JobError> {
        println!(
            "hello, {} (job {}, attempt {})",
            args.name,
            ctx.id(),
            ctx.attempt()
        );
        Ok(())
    }
}

#[tokio::main]
async fn main() -> hopper::Result<()> {
    let server = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "tcp://127.0.0.1:7010".to_owned());
    // The token comes from HOPPER_TOKEN (or `?token=` in the URL); `kinds` tells the server
    // which jobs to send here.
    let sep = if server.contains('?') { '&' } else { '?' };
    let backend = hopper::connect(&format!("{server}{sep}kinds=greet"), Default::default()).await?;
    let mut workers = Workers::new();
    workers.register(Greeter);
    let config = RuntimeConfig::default().with_concurrency(8);
    Runtime::new(backend, workers, config)
        .start()
        .await?
        .run_until_signal()
        .await;
    Ok(())
}
