//! Maintenance: the background services that keep the job table and the node rows in
//! order, shared by every worker runtime and by `hopper serve` (whose remote workers have
//! no database connection of their own).
//!
//! - [`Heartbeat`]: says every period that the node is alive (what "alive" involves, such
//!   as renewing the leases of running jobs, is the node's [`Beat`]);
//! - [`Rescuer`]: takes back jobs whose lease expired and releases dead nodes' jobs (at
//!   once for nodes whose liveness lock went free, where the backend tracks it);
//! - [`Promoter`]: makes scheduled jobs available when due, sleeping until the next one;
//! - [`Pruner`] and [`Vacuumer`]: retention and vacuuming of the job table
//!   ([`Housekeeping`]);
//! - [`Listener`]: hands the backend's wake-ups to the node ([`OnWakeup`]), subscribing
//!   again with backoff.
//!
//! Every service has the same shape: a config with documented defaults (`Default`), a
//! constructor taking the backend and the config, and a loop that does one thing every
//! period and ends when its token is cancelled. A [`Services`] set starts them under
//! [`crate::supervise`] and stops them, both safe to call twice.
//!
//! Every service treats errors alike, by one rule ([`ride_out`], `docs/reliability.md`,
//! "Supervision"): a transient error ([`hopper_core::Error::is_transient`]: the database unreachable,
//! restarting, shutting down) is retried with backoff, logged at warn level once per
//! outage; any other error (a missing table, a refused token) ends the service's run, and
//! its supervisor logs it at error level with its cause, counts it
//! (`hopper_task_failures_total`), restarts the service with backoff, and marks the process
//! unhealthy (its health endpoint says so, and it exits non-zero) if it keeps failing.
//!
//! Every node runs them; the statements use `SKIP LOCKED` or an advisory lock and are
//! idempotent, so several nodes running them at once only share the work.

mod heartbeat;
mod housekeeping;
mod listener;
mod promoter;
mod rescuer;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use hopper_core::backend::{Backend, MaintenanceStore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use heartbeat::{Beat, Heartbeat, HeartbeatConfig, NodeRow};
pub use housekeeping::{Housekeeping, Pruner, Vacuumer};
pub use listener::{Listener, OnWakeup};
pub use promoter::{Promoter, PromoterConfig};
pub use rescuer::{Rescuer, RescuerConfig};

use crate::supervise::{Health, Policy, supervise};

/// The backend's [`MaintenanceStore`], or `None` after saying (at debug level) that
/// `service` stops: a backend without one (the remote transport: its server maintains the
/// queue) has nothing for it to do.
fn maintenance_or_stop<'a>(
    backend: &'a dyn Backend,
    service: &'static str,
) -> Option<&'a dyn MaintenanceStore> {
    let store = backend.maintenance();
    if store.is_none() {
        tracing::debug!(
            backend = backend.name(),
            service,
            "this backend does no maintenance here; the service stops"
        );
    }
    store
}

/// A background service: a named loop that runs until its token is cancelled. Run under
/// supervision by [`Services::start`], which calls [`Service::run`] again after a panic.
pub trait Service: Send + Sync + 'static {
    /// The name it is supervised, logged and counted under (`rescuer`, `pruner`, ...).
    fn name(&self) -> &'static str;

    /// One run of the loop, until `stop` is cancelled. An error ends the run as a panic
    /// does (logged, counted, restarted with backoff, the process unhealthy if it keeps
    /// failing): for failures that waiting will not cure, such as a missing table.
    /// Transient ones are ridden out inside the run (see the module docs).
    fn run(self: Arc<Self>, stop: CancellationToken) -> BoxFuture<'static, crate::Result<()>>;
}

/// The services of one process, started under [`supervise`] with one stop token.
#[derive(Debug)]
pub struct Services {
    health: Health,
    policy: Policy,
    stop: CancellationToken,
    running: Mutex<Vec<(&'static str, JoinHandle<()>)>>,
}

impl Services {
    /// An empty set whose services report to `health` and end when `stop` is cancelled
    /// (by [`Services::stop`] or by its owner).
    pub fn new(health: &Health, stop: CancellationToken) -> Self {
        Services {
            health: health.clone(),
            policy: Policy::default(),
            stop,
            running: Mutex::new(Vec::new()),
        }
    }

    /// Starts `service` under supervision. A service of the same name already started is
    /// left as it is, and nothing starts once the set is stopping.
    pub fn start<S: Service>(&self, service: S) {
        let mut running = self.running();
        let name = service.name();
        if self.stop.is_cancelled() || running.iter().any(|(n, _)| *n == name) {
            return;
        }
        let (service, stop) = (Arc::new(service), self.stop.clone());
        let task = supervise(name, &self.health, self.policy, stop.clone(), move || {
            // The cause with what the database said, for the supervisor's log and health.
            let run = service.clone().run(stop.clone());
            async move { run.await.map_err(|e| e.with_causes()) }
        });
        running.push((name, task));
    }

    /// Stops every service and waits until each has ended. Calling it again (or after
    /// the token was cancelled elsewhere) waits for nothing more.
    pub async fn stop(&self) {
        self.stop.cancel();
        let tasks = std::mem::take(&mut *self.running());
        for (_, task) in tasks {
            let _ = task.await;
        }
    }

    /// Ends every service at once without waiting, as a crash would (for fault tests).
    pub fn abort(&self) {
        self.stop.cancel();
        for (_, task) in self.running().iter() {
            task.abort();
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, Vec<(&'static str, JoinHandle<()>)>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The first wait before retrying a step that failed transiently; doubled after each
/// failure up to [`OUTAGE_BACKOFF_MAX`].
pub const OUTAGE_BACKOFF_FIRST: Duration = Duration::from_millis(100);

/// The longest wait between two tries of a step that keeps failing transiently.
pub const OUTAGE_BACKOFF_MAX: Duration = Duration::from_secs(5);

/// During an outage, the warning is repeated this often (the retries in between are logged
/// at debug level).
const OUTAGE_REMINDER: Duration = Duration::from_secs(60);

/// Runs one step of a service (`what` says what it does, in the logs) until it succeeds,
/// by the rule every service follows (see the module docs):
///
/// - a transient error ([`hopper_core::Error::is_transient`]) is retried after a backoff
///   ([`OUTAGE_BACKOFF_FIRST`], doubling up to [`OUTAGE_BACKOFF_MAX`]), logged at warn level
///   on the first failure and once a minute while it lasts, and at info level once the step
///   succeeds again;
/// - any other error is returned, for the service to end its run with it (its supervisor
///   logs, counts and restarts it).
///
/// `Ok(None)` when `stop` was cancelled while waiting to retry.
pub(crate) async fn ride_out<T, F, Fut>(
    what: &str,
    stop: &CancellationToken,
    mut step: F,
) -> crate::Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = crate::Result<T>>,
{
    let mut backoff = OUTAGE_BACKOFF_FIRST;
    let mut outage: Option<(tokio::time::Instant, u32)> = None;
    let mut warned_at = tokio::time::Instant::now();
    loop {
        match step().await {
            Ok(value) => {
                if let Some((since, failures)) = outage {
                    tracing::info!(after = ?since.elapsed(), failures, "{what}: the database answers again");
                }
                return Ok(Some(value));
            }
            Err(e) if e.is_transient() => {
                let (since, failures) = outage.get_or_insert((tokio::time::Instant::now(), 0));
                *failures += 1;
                if *failures == 1 || warned_at.elapsed() >= OUTAGE_REMINDER {
                    warned_at = tokio::time::Instant::now();
                    tracing::warn!(error = %e.with_causes(), failures = *failures, since = ?since.elapsed(), retry_in = ?backoff, "{what} failed; retrying");
                } else {
                    tracing::debug!(error = %e.with_causes(), retry_in = ?backoff, "{what} failed; retrying");
                }
                if !tick(stop, backoff).await {
                    return Ok(None);
                }
                backoff = (backoff * 2).min(OUTAGE_BACKOFF_MAX);
            }
            // Logged by the supervisor, with the service's name and the cause.
            Err(e) => return Err(e),
        }
    }
}

/// Sleeps `period`, returning false if `stop` was cancelled first.
pub(crate) async fn tick(stop: &CancellationToken, period: Duration) -> bool {
    tokio::select! {
        _ = tokio::time::sleep(period) => true,
        _ = stop.cancelled() => false,
    }
}

/// This host's name (`$HOSTNAME`, else `/etc/hostname`, else `localhost`): part of the
/// default node names and of `hopper serve`'s stable node id.
pub fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use hopper_core::Error;

    use super::*;

    fn lost_connection() -> Error {
        Error::database(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset",
        ))
    }

    #[tokio::test]
    async fn a_transient_error_is_retried_until_the_step_succeeds() {
        let calls = AtomicU32::new(0);
        let stop = CancellationToken::new();
        let got = ride_out("testing", &stop, || async {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Err(lost_connection()),
                n => Ok(n),
            }
        })
        .await;
        assert!(matches!(got, Ok(Some(2))), "{got:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn any_other_error_ends_the_step_at_once() {
        let calls = AtomicU32::new(0);
        let stop = CancellationToken::new();
        let got: crate::Result<Option<()>> = ride_out("testing", &stop, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(Error::Schema("relation \"jobs\" does not exist".into()))
        })
        .await;
        assert!(matches!(got, Err(Error::Schema(_))), "{got:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn stopping_ends_the_wait_between_tries() {
        let stop = CancellationToken::new();
        stop.cancel();
        let got: crate::Result<Option<()>> =
            ride_out("testing", &stop, || async { Err(lost_connection()) }).await;
        assert!(matches!(got, Ok(None)), "{got:?}");
    }
}
