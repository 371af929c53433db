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
//! period, logs and carries on after an error, and ends when its token is cancelled. A
//! [`Services`] set starts them under [`crate::supervise`] (restarted when they panic, the
//! process unhealthy when they keep failing) and stops them, both safe to call twice.
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

pub use heartbeat::{Beat, Heartbeat, HeartbeatConfig};
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
            service.clone().run(stop.clone())
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
