//! The command line, as clap parses it.

use clap::{Args, Parser, Subcommand, ValueEnum};

/// hopper: a durable background-job queue on PostgreSQL.
#[derive(Debug, Parser)]
#[command(name = "hopper", version, about)]
pub struct Cli {
    /// The database: postgres://…, sqlite://path.db (a missing file is created only by
    /// migrate, demo and serve; the other commands say it does not exist), or tcp://… of
    /// a `hopper serve`.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,

    /// The schema holding hopper's tables.
    #[arg(long, env = "HOPPER_SCHEMA", default_value = "hopper", global = true)]
    pub schema: String,

    /// What sits between hopper and PostgreSQL: none (or session) or transaction (PgBouncer
    /// in transaction mode: no session state through it; see docs/deployment.md).
    #[arg(long, env = "HOPPER_POOLER", default_value = "none", global = true)]
    pub pooler: hopper::Pooler,

    /// A URL straight to PostgreSQL, past a transaction pooler, for the LISTEN connection
    /// (without one, workers behind the pooler poll).
    #[arg(long, env = "HOPPER_DIRECT_URL", global = true, hide_env_values = true)]
    pub direct_url: Option<String>,

    /// The longest the admin commands (enqueue, jobs, stats, queues, cron, nodes) wait for a
    /// lock another transaction holds (a job's or a queue's row), past which they fail saying
    /// so (e.g. 5s, 500ms; 0s: the server's own setting). Behind a transaction pooler, it
    /// bounds the commands that change jobs and queues: jobs retry, jobs cancel, queues pause,
    /// queues resume and queues limit.
    #[arg(long, env = "HOPPER_LOCK_TIMEOUT", default_value = "5s", global = true)]
    pub lock_timeout: String,

    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Apply pending migrations (safe to run twice, and concurrently).
    Migrate,
    /// Enqueue one job; prints its id.
    Enqueue(EnqueueArgs),
    /// Inspect and act on jobs.
    #[command(subcommand)]
    Jobs(JobsCommand),
    /// Counts by queue and state, and the oldest available job's age.
    Stats(StatsArgs),
    /// Queue settings: list, pause, resume, global limits.
    #[command(subcommand)]
    Queues(crate::queues::QueuesCommand),
    /// Periodic jobs registered by runtimes.
    #[command(subcommand)]
    Cron(crate::queues::CronCommand),
    /// The registered nodes (runtimes and servers): queues, concurrency, last heartbeat; a
    /// page at a time, by name.
    Nodes(NodesArgs),
    /// Run the demo: 500 jobs, mixed priorities, every 12th fails; prints a summary.
    Demo(DemoArgs),
    /// Run the standard benchmark workloads.
    Bench(BenchArgs),
    /// Run the network server for clients and workers in any language (ZeroMQ + CBOR).
    Serve(crate::serve::ServeArgs),
    /// Run bench jobs (no-ops) as a worker, usually of a server (`--database-url tcp://…`).
    // Hidden from `--help`: it runs only the bench's no-op job (`hopper bench --workload
    // server` starts it), a tool of the benchmarks, not a worker for users' jobs (those run
    // in a `Runtime` of the application, or in a client library of `hopper serve`).
    #[command(hide = true)]
    Worker(crate::worker::WorkerArgs),
}

/// `hopper enqueue`.
#[derive(Debug, Args)]
pub struct EnqueueArgs {
    /// The queue.
    #[arg(long, default_value = "default")]
    pub queue: String,
    /// The kind of job (which worker runs it).
    #[arg(long)]
    pub kind: String,
    /// The arguments, a JSON object or array; `@path` reads them from a file, `-` from stdin.
    #[arg(long, default_value = "{}")]
    pub args: String,
    /// high, normal, low, or a number (lower runs first).
    #[arg(long, default_value = "normal")]
    pub priority: String,
    /// Run after this delay (e.g. 10s, 5m, 1h30m).
    #[arg(long, conflicts_with = "run_at")]
    pub delay: Option<String>,
    /// Run at this time (RFC 3339, e.g. 2026-11-22T10:00:00Z).
    #[arg(long)]
    pub run_at: Option<String>,
    /// Attempts before the job is dead-lettered.
    #[arg(long, default_value_t = 25)]
    pub max_attempts: i32,
    /// How long one run may take (e.g. 30s, 30m).
    #[arg(long, default_value = "30m")]
    pub timeout: String,
    /// The group (tenant): groups of a queue take turns.
    #[arg(long)]
    pub group: Option<String>,
    /// A unique key: no second job with it while one is waiting or running.
    #[arg(long)]
    pub unique_key: Option<String>,
    /// What to do when the key is taken: ignore (print the holder's id), reject, replace.
    #[arg(long, default_value = "ignore", requires = "unique_key")]
    pub unique_policy: String,
    /// Metadata, a JSON object of at most 16 KiB (e.g. '{"tenant":"acme"}'), stored beside
    /// the arguments; `jobs list --meta` finds jobs by it.
    #[arg(long)]
    pub meta: Option<String>,
    /// A W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>) stored as meta.traceparent, so the
    /// job's run joins that trace.
    #[arg(long)]
    pub traceparent: Option<String>,
}

/// `hopper jobs …`.
#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// List jobs, newest first.
    List {
        /// Only this queue.
        #[arg(long)]
        queue: Option<String>,
        /// Only this state (scheduled, available, running, completed, failed, cancelled).
        #[arg(long)]
        state: Option<String>,
        /// Only this kind.
        #[arg(long)]
        kind: Option<String>,
        /// Only this group (tenant).
        #[arg(long)]
        group: Option<String>,
        /// Only jobs whose metadata contains this JSON object (top-level keys and values,
        /// e.g. '{"tenant":"acme"}').
        #[arg(long)]
        meta: Option<String>,
        /// At most this many (at least 1; 0 is refused).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
        limit: u32,
    },
    /// Show one job with its metadata, error history and per-attempt logs.
    Show {
        /// The job's id.
        id: String,
    },
    /// Retry a failed or cancelled job now.
    Retry {
        /// The job's id.
        id: String,
    },
    /// Cancel a job that has not finished.
    Cancel {
        /// The job's id.
        id: String,
    },
    /// Delete finished jobs past their retention now, as the runtime's pruner does.
    Prune(PruneArgs),
}

/// `hopper nodes`: which page of the nodes.
#[derive(Debug, Args)]
pub struct NodesArgs {
    /// At most this many (at least 1; 0 is refused).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: u32,
    /// The page after another: the cursor it printed (`next_before` under `--json`).
    #[arg(long)]
    pub before: Option<String>,
}

/// `hopper stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Keep refreshing (a live view, every `--interval`) until Ctrl-C. With `--json`, one
    /// JSON line per refresh.
    #[arg(long)]
    pub watch: bool,
    /// The refresh period of `--watch` (e.g. 1s, 500ms).
    #[arg(long, default_value = "1s", requires = "watch")]
    pub interval: String,
}

/// `hopper jobs prune`: what to delete.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Count what would be deleted; delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Delete completed and cancelled jobs that finished longer ago than this.
    #[arg(long, default_value = "24h")]
    pub completed_older_than: String,
    /// Delete failed (dead-lettered) jobs that finished longer ago than this.
    #[arg(long, default_value = "7days")]
    pub failed_older_than: String,
    /// Most jobs deleted per statement.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch: u32,
    /// Pause between statements (e.g. 20ms), on top of three times as long as the last
    /// statement took, so the hot path does not feel the pruning.
    #[arg(long, default_value = "20ms")]
    pub pause: String,
}

/// `hopper demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// How many jobs.
    #[arg(long, default_value_t = 500)]
    pub jobs: u32,
}

/// The benchmark workloads of `BENCHMARK.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// W1: bulk enqueue, 1,000 jobs per call.
    Enqueue,
    /// W2: enqueue one job per call, sequentially.
    EnqueueSingle,
    /// W3: drain every unfinished bench job, then exit.
    Drain,
    /// W4: enqueue→start latency at 200 jobs/s on an idle worker.
    Latency,
    /// W1, W2, W3 and W4 in turn.
    All,
    /// W5: the claim rate at the head of a `--backlog` backlog against a 1,000-job one
    /// (`--jobs` measured starts each, default 100,000).
    ClaimScale,
    /// W6: `--duration` at `--rate` (default 70% of a W3 drain measured first); the drift
    /// between the first and the last half.
    Soak,
    /// W7: drain every unfinished bench job through an in-process server with 4 worker
    /// processes (`hopper worker`).
    ServerDrain,
    /// Enqueue→start latency through the server at 200 jobs/s on an idle remote worker.
    ServerLatency,
    /// W1 + W3, then W1 + W7, then the latency through the server, in one run.
    Server,
}

/// `hopper bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Which workload.
    #[arg(long, value_enum, default_value = "all")]
    pub workload: Workload,
    /// Jobs to enqueue (default: 100,000 for enqueue, 10,000 for enqueue-single, 2,000 for latency).
    #[arg(long)]
    pub jobs: Option<u64>,
    /// Worker concurrency for drain and latency.
    #[arg(long, default_value_t = 50)]
    pub concurrency: usize,
    /// Each bench job sleeps this long (ms).
    #[arg(long, default_value_t = 0)]
    pub work_ms: u64,
    /// Lines each bench job writes to its per-job log, for drain, latency and the server
    /// workloads (stored before the job's outcome).
    #[arg(long, default_value_t = 0)]
    pub log_lines: u32,
    /// Timeout (and so lease) of the bench jobs a drain runs (e.g. 2s).
    #[arg(long)]
    pub job_timeout: Option<String>,
    /// The runtime's prefetch for drain and latency (`RuntimeConfig::prefetch`; default:
    /// sized to the jobs' pace, up to one claim batch), for tuning experiments.
    #[arg(long)]
    pub prefetch: Option<usize>,
    /// The runtime's claims in flight for drain and latency
    /// (`RuntimeConfig::claims_in_flight`; default 4), for tuning experiments.
    #[arg(long)]
    pub claims_in_flight: Option<usize>,
    /// Encrypt the server workloads (W7, server-latency) with CURVE.
    #[arg(long)]
    pub curve: bool,
    /// The large backlog of claim-scale (W5).
    #[arg(long, default_value_t = 1_000_000)]
    pub backlog: u64,
    /// How long the soak (W6) runs (e.g. 10m, 90s).
    #[arg(long, default_value = "10m")]
    pub duration: String,
    /// Jobs per second the soak (W6) enqueues (default: 70% of a W3 drain measured first).
    #[arg(long)]
    pub rate: Option<f64>,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// `--lock-timeout`'s help names the commands it bounds, and each exists (it named a
    /// "delete" and a "clear" the CLI does not have).
    #[test]
    fn the_lock_timeout_help_names_commands_that_exist() {
        let cli = super::Cli::command();
        let help = cli
            .get_arguments()
            .find(|a| a.get_id() == "lock_timeout")
            .and_then(|a| a.get_help())
            .map(ToString::to_string)
            .unwrap_or_default();
        let (_, bounded) = help
            .split_once("bounds the commands that change jobs and queues: ")
            .unwrap_or_default();
        let named: Vec<&str> = bounded
            .trim_end_matches('.')
            .split([',', ' '])
            .filter(|w| !w.is_empty() && *w != "and")
            .collect();
        assert_eq!(named.len(), 10, "{help}");
        for pair in named.chunks(2) {
            let found = cli
                .find_subcommand(pair[0])
                .and_then(|c| c.find_subcommand(pair[1]));
            assert!(found.is_some(), "no command {pair:?} in {help}");
        }
    }
}
