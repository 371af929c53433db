//! Middleware (`hopper::middleware`) on a real SQLite store: the order they run in on
//! enqueue and around an attempt, what they may change (jobs on enqueue, arguments and the
//! result on execution), and their error paths (a refused enqueue writes nothing, a panic
//! reaches them as an error, a middleware may skip the worker).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper::backend::Backend;
use hopper::middleware::{AttemptScope, ClaimedJob, Middleware, Next, Outcome};
use hopper::testing::{InlineClient, JobOutcome};
use hopper::{
    Client, Error, JobArgs, JobContext, JobError, JobListParams, NewJob, Runtime, RuntimeConfig,
    SqliteBackend, SqliteOptions, Worker, Workers,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::mpsc;

type Log = Arc<Mutex<Vec<String>>>;

fn push(log: &Log, entry: impl Into<String>) {
    log.lock().expect("log").push(entry.into());
}

fn entries(log: &Log) -> Vec<String> {
    log.lock().expect("log").clone()
}

#[derive(Serialize, Deserialize)]
struct Say {
    text: String,
}

impl JobArgs for Say {
    const KIND: &'static str = "say";
}

/// Logs the text it runs with; fails for "fail", panics for "panic".
struct Sayer(Log);

#[async_trait::async_trait]
impl Worker for Sayer {
    type Args = Say;

    async fn process(&self, _ctx: &JobContext, args: Say) -> Result<(), JobError> {
        push(&self.0, format!("worker {}", args.text));
        match args.text.as_str() {
            "fail" => Err(JobError::retry("it failed")),
            "panic" => panic!("the worker panicked"),
            "hang" => std::future::pending().await,
            _ => Ok(()),
        }
    }
}

/// Logs its name before and after the rest of the chain, and the result it saw.
struct Around {
    name: &'static str,
    log: Log,
}

#[async_trait::async_trait]
impl Middleware for Around {
    async fn enqueue(&self, jobs: &mut [NewJob]) -> hopper::Result<()> {
        push(&self.log, format!("{} enqueue {}", self.name, jobs.len()));
        Ok(())
    }

    async fn execute(
        &self,
        _ctx: &JobContext,
        args: &Value,
        next: Next<'_>,
    ) -> Result<(), JobError> {
        push(&self.log, format!("{} before", self.name));
        let result = next.run(args).await;
        let seen = match &result {
            Ok(()) => "ok".to_owned(),
            Err(e) => format!("error {e}"),
        };
        push(&self.log, format!("{} after {seen}", self.name));
        result
    }
}

/// "Encrypts" arguments on enqueue (reverses the text and wraps it) and "decrypts" them
/// around the attempt; refuses to enqueue a job whose text is "forbidden".
struct Sealer;

fn reversed(text: &str) -> String {
    text.chars().rev().collect()
}

#[async_trait::async_trait]
impl Middleware for Sealer {
    async fn enqueue(&self, jobs: &mut [NewJob]) -> hopper::Result<()> {
        for job in jobs.iter_mut() {
            let text = job.args["text"].as_str().unwrap_or_default().to_owned();
            if text == "forbidden" {
                return Err(Error::InvalidInput("a forbidden job".into()));
            }
            job.args = json!({ "sealed": reversed(&text) });
        }
        Ok(())
    }

    async fn execute(
        &self,
        _ctx: &JobContext,
        args: &Value,
        next: Next<'_>,
    ) -> Result<(), JobError> {
        let Some(sealed) = args["sealed"].as_str() else {
            return Err(JobError::permanent("arguments not sealed"));
        };
        next.run(&json!({ "text": reversed(sealed) })).await
    }
}

/// Turns a failed attempt into a snooze, and runs no worker for the text "skip".
struct Forgiving;

#[async_trait::async_trait]
impl Middleware for Forgiving {
    async fn execute(
        &self,
        _ctx: &JobContext,
        args: &Value,
        next: Next<'_>,
    ) -> Result<(), JobError> {
        if args["text"] == "skip" {
            return Ok(());
        }
        next.run(args)
            .await
            .map_err(|_| JobError::Snooze(Duration::from_secs(60)))
    }
}

/// A fresh, migrated in-memory SQLite store.
async fn sqlite() -> anyhow::Result<Arc<dyn Backend>> {
    let backend: Arc<dyn Backend> =
        Arc::new(SqliteBackend::open_in_memory(SqliteOptions::default()).await?);
    backend.migrate().await?;
    Ok(backend)
}

fn say(text: &str) -> anyhow::Result<NewJob> {
    Ok(NewJob::of(&Say { text: text.into() })?)
}

async fn stored_args(client: &Client) -> anyhow::Result<Vec<Value>> {
    let all = JobListParams {
        limit: 100,
        ..JobListParams::default()
    };
    let mut jobs = client.jobs(&all).await?;
    jobs.sort_by_key(|j| j.id);
    Ok(jobs.into_iter().map(|j| j.args).collect())
}

#[tokio::test]
async fn enqueue_middleware_run_in_order_and_what_they_change_is_stored() -> anyhow::Result<()> {
    let backend = sqlite().await?;
    let log = Log::default();
    let client = Client::new(backend)
        .with_middleware(Around {
            name: "a",
            log: log.clone(),
        })
        .with_middleware(Sealer)
        .with_middleware(Around {
            name: "b",
            log: log.clone(),
        });

    client.insert(say("one")?).await?;
    client.insert_many(&[say("two")?, say("three")?]).await?;
    assert_eq!(
        entries(&log),
        ["a enqueue 1", "b enqueue 1", "a enqueue 2", "b enqueue 2"]
    );
    assert_eq!(
        stored_args(&client).await?,
        [
            json!({"sealed": "eno"}),
            json!({"sealed": "owt"}),
            json!({"sealed": "eerht"})
        ]
    );
    Ok(())
}

#[tokio::test]
async fn a_refused_enqueue_writes_nothing_and_stops_the_chain() -> anyhow::Result<()> {
    let backend = sqlite().await?;
    let log = Log::default();
    let client = Client::new(backend)
        .with_middleware(Sealer)
        .with_middleware(Around {
            name: "after",
            log: log.clone(),
        });

    let refused = client.insert_many(&[say("fine")?, say("forbidden")?]).await;
    assert!(
        matches!(&refused, Err(Error::InvalidInput(m)) if m == "a forbidden job"),
        "{refused:?}"
    );
    let refused = client.upsert(say("forbidden")?).await;
    assert!(refused.is_err(), "{refused:?}");
    assert!(
        entries(&log).is_empty(),
        "a later middleware ran: {:?}",
        entries(&log)
    );
    assert!(
        stored_args(&client).await?.is_empty(),
        "a refused enqueue wrote jobs"
    );
    Ok(())
}

/// A runner of single jobs through the middleware of `workers`, on a fresh store.
async fn inline(workers: Workers) -> anyhow::Result<InlineClient> {
    let backend = sqlite().await?;
    Ok(InlineClient::new(backend, workers))
}

#[tokio::test]
async fn execution_middleware_nest_the_first_added_outermost() -> anyhow::Result<()> {
    let log = Log::default();
    let mut workers = Workers::new();
    workers
        .register(Sayer(log.clone()))
        .middleware(Around {
            name: "outer",
            log: log.clone(),
        })
        .middleware(Around {
            name: "inner",
            log: log.clone(),
        });
    let inline = inline(workers).await?;

    let run = inline.insert(say("hi")?).await?;
    assert_eq!(run.outcome, JobOutcome::Completed);
    assert_eq!(
        entries(&log),
        [
            "outer before",
            "inner before",
            "worker hi",
            "inner after ok",
            "outer after ok"
        ]
    );
    Ok(())
}

#[tokio::test]
async fn a_worker_panic_reaches_the_middleware_as_a_retryable_error() -> anyhow::Result<()> {
    let log = Log::default();
    let mut workers = Workers::new();
    workers.register(Sayer(log.clone())).middleware(Around {
        name: "m",
        log: log.clone(),
    });
    let inline = inline(workers).await?;

    let run = inline.insert(say("panic")?).await?;
    assert!(
        matches!(&run.outcome, JobOutcome::Retry { error, .. } if error == "panicked: the worker panicked"),
        "{:?}",
        run.outcome
    );
    assert_eq!(
        entries(&log),
        [
            "m before",
            "worker panic",
            "m after error panicked: the worker panicked"
        ]
    );
    Ok(())
}

#[tokio::test]
async fn middleware_can_change_the_arguments_the_result_or_skip_the_worker() -> anyhow::Result<()> {
    let log = Log::default();
    let mut workers = Workers::new();
    workers
        .register(Sayer(log.clone()))
        .middleware(Forgiving)
        .middleware(Sealer);
    let inline = inline(workers).await?;

    // Sealed as the enqueue middleware stores it; the worker sees the plain text.
    let run = inline
        .insert(NewJob::new("say", json!({"sealed": "olleh"})))
        .await?;
    assert_eq!(run.outcome, JobOutcome::Completed);
    // A failure the outer middleware turns into a snooze.
    let run = inline
        .insert(NewJob::new("say", json!({"sealed": "liaf"})))
        .await?;
    assert_eq!(
        run.outcome,
        JobOutcome::Snoozed {
            retry_in: Duration::from_secs(60)
        }
    );
    // Arguments the inner middleware refuses: the worker never runs, and the outer one
    // still forgives.
    let run = inline
        .insert(NewJob::new("say", json!({"text": "plain"})))
        .await?;
    assert_eq!(
        run.outcome,
        JobOutcome::Snoozed {
            retry_in: Duration::from_secs(60)
        }
    );
    // Skipped by the outer middleware: completed without the worker.
    let run = inline
        .insert(NewJob::new("say", json!({"text": "skip"})))
        .await?;
    assert_eq!(run.outcome, JobOutcome::Completed);
    assert_eq!(entries(&log), ["worker hello", "worker fail"]);
    Ok(())
}

/// Follows every attempt through an [`AttemptScope`]: says on `ended` how each ended, and
/// whether it was polled inside the scope.
struct Watch(mpsc::UnboundedSender<String>);

struct Watched {
    text: String,
    polls: std::sync::atomic::AtomicUsize,
    ended: mpsc::UnboundedSender<String>,
}

#[async_trait::async_trait]
impl Middleware for Watch {
    fn attempt(&self, job: &ClaimedJob) -> Option<Box<dyn AttemptScope>> {
        Some(Box::new(Watched {
            text: job.args["text"].as_str().unwrap_or_default().to_owned(),
            polls: Default::default(),
            ended: self.0.clone(),
        }))
    }
}

impl AttemptScope for Watched {
    fn within(&self, poll: &mut dyn FnMut()) {
        self.polls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        poll();
    }

    fn end(self: Box<Self>, outcome: Option<&Outcome>, _ran: Duration) {
        let end = match outcome {
            Some(Outcome::Completed { .. }) => "completed".to_owned(),
            Some(Outcome::Retry { error, .. }) => format!("retry: {error}"),
            other => format!("{other:?}"),
        };
        let polled = self.polls.load(std::sync::atomic::Ordering::Relaxed) > 0;
        let _ = self
            .ended
            .send(format!("{} {end} (polled: {polled})", self.text));
    }
}

/// A runtime ends every attempt's scope with its outcome, also when the chain's future was
/// dropped (a timeout), and polls the attempt inside it.
#[tokio::test]
async fn an_attempt_scope_hears_how_each_attempt_ended() -> anyhow::Result<()> {
    let backend = sqlite().await?;
    let (ended, mut ends) = mpsc::unbounded_channel();
    let log = Log::default();
    let mut workers = Workers::new();
    workers
        .register(Sayer(log.clone()))
        .middleware(Watch(ended));
    let client = Client::new(backend.clone());
    client.insert(say("hi")?).await?;
    client
        .insert(say("hang")?.with_timeout(Duration::from_millis(200)))
        .await?;
    let config = RuntimeConfig::default().with_poll_interval(Duration::from_millis(20));
    let handle = Runtime::new(backend, workers, config).start().await?;
    let mut seen = Vec::new();
    for _ in 0..2 {
        let end = tokio::time::timeout(Duration::from_secs(20), ends.recv()).await?;
        seen.extend(end);
    }
    handle.shutdown().await;
    seen.sort();
    assert_eq!(
        seen,
        [
            "hang retry: timed out after 200ms (polled: true)",
            "hi completed (polled: true)"
        ]
    );
    Ok(())
}
