//! Supervision of background tasks: no task dies silently.
//!
//! Every long-lived task of the runtime (completer, promoter, rescuer, listener,
//! heartbeat, pruner, vacuumer, periodic enqueuer), of `hopper serve` and of the HTTP
//! server runs under [`supervise`]. The rules (`docs/reliability.md`, "Supervision"):
//!
//! - a task that panics or returns an error is logged at error level with its cause,
//!   counted in [`crate::metrics::TASK_FAILURES_TOTAL`], and started again after a
//!   backoff (100 ms, doubling up to 30 s);
//! - a task that ran for a minute before failing starts its count afresh;
//! - after five failures in a row the task is not started again: the [`Health`] it
//!   reports to turns unhealthy with the cause. The HTTP health endpoint answers 503 with
//!   it, and the processes (`hopper worker`, `hopper serve`) stop and exit non-zero rather
//!   than run on without, say, a promoter;
//! - a task that returns `()` or `Ok(())` has finished (it was told to stop): that is not a
//!   failure.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Whether a process's supervised tasks are all still running. Cheap to clone; every
/// clone sees the same state.
#[derive(Debug, Clone)]
pub struct Health {
    failure: Arc<watch::Sender<Option<String>>>,
    failures: Arc<AtomicU64>,
    /// The supervised task that gave up first.
    task: Arc<std::sync::OnceLock<&'static str>>,
}

impl Default for Health {
    fn default() -> Self {
        Health::new()
    }
}

impl Health {
    /// A healthy state.
    pub fn new() -> Self {
        Health {
            failure: Arc::new(watch::channel(None).0),
            failures: Arc::new(AtomicU64::new(0)),
            task: Arc::new(std::sync::OnceLock::new()),
        }
    }

    /// The name of the supervised task that gave up (`promoter`, `rescuer`…), if one did:
    /// what a health endpoint may show to anyone, where the cause may not be.
    pub fn failed_task(&self) -> Option<&'static str> {
        self.task.get().copied()
    }

    /// True until a supervised task gave up.
    pub fn is_healthy(&self) -> bool {
        self.failure.borrow().is_none()
    }

    /// Why the process is unhealthy: the task that gave up and its last cause.
    pub fn failure(&self) -> Option<String> {
        self.failure.borrow().clone()
    }

    /// How many times supervised tasks failed (each restart, and the final failure).
    pub fn task_failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Resolves once a supervised task gave up, with [`Health::failure`].
    pub async fn failed(&self) -> String {
        let mut rx = self.failure.subscribe();
        match rx.wait_for(Option::is_some).await {
            Ok(failure) => failure.clone().unwrap_or_default(),
            // The sender lives in `self`: it cannot be gone while this waits.
            Err(_) => std::future::pending().await,
        }
    }

    /// Marks the process unhealthy (the first cause is kept).
    pub fn fail(&self, cause: String) {
        self.failure.send_if_modified(|failure| {
            if failure.is_none() {
                *failure = Some(cause);
                true
            } else {
                false
            }
        });
    }
}

/// How a supervised task restarts. [`Policy::default`] gives the documented rules, the
/// `with_*` methods change them; `#[non_exhaustive]`, so a new rule is not a breaking change.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Policy {
    /// The wait before the first restart; doubled after each failure.
    pub first_backoff: Duration,
    /// The longest wait between restarts.
    pub max_backoff: Duration,
    /// Failures in a row after which the task is given up and the process unhealthy.
    pub max_failures: u32,
    /// A run at least this long before failing starts the count afresh.
    pub stable_after: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            first_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(30),
            max_failures: 5,
            stable_after: Duration::from_secs(60),
        }
    }
}

impl Policy {
    /// With this wait before the first restart.
    pub fn with_first_backoff(self, first_backoff: Duration) -> Self {
        Policy {
            first_backoff,
            ..self
        }
    }

    /// With this longest wait between restarts.
    pub fn with_max_backoff(self, max_backoff: Duration) -> Self {
        Policy {
            max_backoff,
            ..self
        }
    }

    /// With the task given up after `max_failures` failures in a row.
    pub fn with_max_failures(self, max_failures: u32) -> Self {
        Policy {
            max_failures,
            ..self
        }
    }

    /// With a run this long counting as stable.
    pub fn with_stable_after(self, stable_after: Duration) -> Self {
        Policy {
            stable_after,
            ..self
        }
    }
}

/// What a supervised task's future may return: `()` or `Ok(())` when it finished, an
/// error when it failed.
pub trait TaskEnd {
    /// `None` when the task finished, the cause when it failed.
    fn failure(self) -> Option<String>;
}

impl TaskEnd for () {
    fn failure(self) -> Option<String> {
        None
    }
}

impl<E: std::fmt::Display> TaskEnd for Result<(), E> {
    fn failure(self) -> Option<String> {
        self.err().map(|e| e.to_string())
    }
}

/// Spawns `task()` under supervision: restarted by `policy` when it panics or fails,
/// reported to `health` when it gives up. `stop` ends the waits between restarts (the
/// task itself watches its own token).
pub fn supervise<F, Fut>(
    name: &'static str,
    health: &Health,
    policy: Policy,
    stop: CancellationToken,
    mut task: F,
) -> JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future + Send + 'static,
    Fut::Output: TaskEnd,
{
    let health = health.clone();
    tokio::spawn(async move {
        let mut failures = 0u32;
        let mut backoff = policy.first_backoff;
        loop {
            let started = Instant::now();
            let cause = match AssertUnwindSafe(task()).catch_unwind().await {
                Ok(end) => match end.failure() {
                    None => return,
                    Some(cause) => cause,
                },
                Err(panic) => format!("panicked: {}", panic_message(&*panic)),
            };
            if started.elapsed() >= policy.stable_after {
                failures = 0;
                backoff = policy.first_backoff;
            }
            failures += 1;
            health.failures.fetch_add(1, Ordering::Relaxed);
            crate::metrics::task_failed(name);
            if failures >= policy.max_failures {
                tracing::error!(task = name, %cause, failures, "background task keeps failing; giving up: the process is unhealthy");
                let _ = health.task.set(name);
                health.fail(format!(
                    "background task {name} failed {failures} times in a row: {cause}"
                ));
                return;
            }
            tracing::error!(task = name, %cause, failures, restart_in = ?backoff, "background task failed; restarting it");
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = stop.cancelled() => return,
            }
            backoff = (backoff * 2).min(policy.max_backoff);
        }
    })
}

/// The text of a panic's payload (what `panic!` was given), when it is text.
fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}
