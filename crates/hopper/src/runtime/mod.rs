//! The worker runtime: claims jobs, runs them with bounded concurrency, records outcomes.
//!
//! Split as River splits it: the [`producer`] claims, the [`executor`] runs one job, the
//! [`completer`] writes outcomes in batches, and the [`crate::maintenance`] services (with
//! the runtime's own in [`services`]) keep leases, nodes and schedules in order. [`Runtime::start`] wires them together and returns a
//! [`RuntimeHandle`] for a graceful shutdown.

mod completer;
mod config;
mod executor;
pub(crate) mod handler;
mod liveness;
mod prefetch;
mod producer;
mod services;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hopper_core::backend::NodeDeregisterParams;
use hopper_core::{Backend, ClaimParams, ClaimedJob, JobId, Lease, NodeInfo, Result};
use tokio::sync::{Notify, Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

pub use config::RuntimeConfig;

use crate::context::{RunState, StopReason};
use crate::maintenance::{
    Heartbeat, HeartbeatConfig, Listener, Promoter, PromoterConfig, Pruner, Rescuer, RescuerConfig,
    Services, Vacuumer,
};
use crate::registry::Workers;
use crate::supervise::{Health, Policy, supervise};

/// A job being run by this node.
#[derive(Debug)]
pub(crate) struct Running {
    lease: Lease,
    run: Arc<RunState>,
    renewed: Instant,
}

/// What the runtime's tasks share.
pub(crate) struct Shared {
    backend: Arc<dyn Backend>,
    workers: Workers,
    config: RuntimeConfig,
    node: NodeInfo,
    slots: Arc<Semaphore>,
    blocking: Arc<Semaphore>,
    running: Mutex<HashMap<JobId, Running>>,
    completer: mpsc::Sender<completer::Pending>,
    wake: Notify,
    /// Wakes the promoter early: a job was just scheduled (retry backoff, snooze).
    promote: Arc<Notify>,
    stop_claiming: CancellationToken,
    stop_services: CancellationToken,
    /// How long this node's jobs take: sizes the default prefetch.
    pace: hopper_core::pace::Pace,
    /// Set while the node has lost its liveness lock and not yet taken it again: it then
    /// neither claims nor heartbeats ([`liveness`]).
    fenced: AtomicBool,
}

impl Shared {
    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<JobId, Running>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Jobs to keep on hand beyond the free slots (one queue only): the configured figure,
    /// or one sized to the pace of the jobs run so far ([`hopper_core::pace::prefetch_for`]).
    fn prefetch(&self) -> usize {
        self.config.prefetch.unwrap_or_else(|| {
            hopper_core::pace::prefetch_for(
                self.config.concurrency,
                self.pace.mean(),
                self.config.claim_batch.max(1),
            )
        })
    }

    /// Claims for this node, unless it is fenced (then nothing, as from a drained queue:
    /// the producers wait for a wake-up or their poll interval).
    async fn claim(&self, params: &ClaimParams) -> Result<Vec<ClaimedJob>> {
        if self.fenced.load(Ordering::Acquire) {
            return Ok(Vec::new());
        }
        let span = crate::spans::claim(&params.queue, params.limit);
        crate::spans::seam(span, self.backend.job_claim(params), |jobs| {
            Some(jobs.len() as u64)
        })
        .await
    }

    fn running_insert(&self, id: JobId, running: Running) {
        self.running().insert(id, running);
    }

    fn running_remove(&self, id: JobId) {
        self.running().remove(&id);
    }

    fn running_stop(&self, id: JobId, reason: StopReason) {
        if let Some(r) = self.running().get(&id) {
            r.run.stop(reason);
        }
    }

    fn running_due_for_renewal(&self, period: Duration) -> Vec<Lease> {
        let now = Instant::now();
        self.running()
            .values()
            .filter(|r| now.duration_since(r.renewed) + period >= self.config.lease / 2)
            .map(|r| r.lease)
            .collect()
    }

    fn running_renewed(&self, leases: &[Lease], at: Instant) {
        let mut running = self.running();
        for lease in leases {
            if let Some(r) = running.get_mut(&lease.job_id) {
                r.renewed = at;
            }
        }
    }
}

/// Builds and starts a worker runtime.
///
/// ```no_run
/// # async fn example(backend: std::sync::Arc<dyn hopper::backend::Backend>, workers: hopper::Workers) -> hopper::Result<()> {
/// use hopper::{Runtime, RuntimeConfig};
///
/// let config = RuntimeConfig::default().with_concurrency(50);
/// let handle = Runtime::new(backend, workers, config).start().await?;
/// handle.run_until_signal().await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Runtime {
    backend: Arc<dyn Backend>,
    workers: Workers,
    config: RuntimeConfig,
    periodic: Vec<crate::PeriodicJob>,
}

impl Runtime {
    /// A runtime running `workers` on `backend`.
    pub fn new(backend: Arc<dyn Backend>, workers: Workers, config: RuntimeConfig) -> Self {
        Runtime {
            backend,
            workers,
            config,
            periodic: Vec::new(),
        }
    }

    /// Registers a periodic job: this runtime enqueues its ticks (once per tick however
    /// many runtimes registered it), and `hopper cron list` shows it.
    pub fn periodic(mut self, job: crate::PeriodicJob) -> Self {
        self.periodic.retain(|p| p.name() != job.name());
        self.periodic.push(job);
        self
    }

    /// Registers the node and starts claiming. Fails (with the backend's reason) if the
    /// database cannot be reached, and with [`hopper_core::Error::InvalidInput`] for a
    /// setting it cannot run with ([`RuntimeConfig::check`]).
    pub async fn start(self) -> Result<RuntimeHandle> {
        self.config.check()?;
        let concurrency = self.config.concurrency.max(1);
        let node = NodeInfo {
            id: Uuid::now_v7(),
            name: self
                .config
                .node_name
                .clone()
                .unwrap_or_else(default_node_name),
            queues: self.config.queues.clone(),
            concurrency: i32::try_from(concurrency).unwrap_or(i32::MAX),
        };
        // With node liveness, the node holds its lock before it is registered as holding it.
        let hold = match self.backend.node_liveness() {
            Some(liveness) => Some(liveness.node_hold(&node).await?),
            None => {
                self.backend.node_heartbeat(&node).await?;
                None
            }
        };
        let (completer_tx, completer_rx) =
            mpsc::channel(concurrency.max(self.config.complete_batch) * 2);
        let shared = Arc::new(Shared {
            backend: self.backend.clone(),
            workers: self.workers,
            node,
            slots: Arc::new(Semaphore::new(concurrency)),
            blocking: Arc::new(Semaphore::new(self.config.blocking_threads.max(1))),
            running: Mutex::new(HashMap::new()),
            completer: completer_tx,
            wake: Notify::new(),
            promote: Arc::new(Notify::new()),
            stop_claiming: CancellationToken::new(),
            stop_services: CancellationToken::new(),
            pace: hopper_core::pace::Pace::default(),
            fenced: AtomicBool::new(false),
            config: self.config,
        });
        let health = Health::new();
        let policy = Policy::default();
        // The completer ends when the shutdown closes its channel and it has drained, so
        // nothing stops its restarts but that; it takes the channel back from the run that
        // failed.
        let completer_rx = Arc::new(tokio::sync::Mutex::new(completer_rx));
        let (backend, batch) = (self.backend, shared.config.complete_batch.max(1));
        let (lease, promote) = (shared.config.lease, shared.promote.clone());
        let close_outcomes = CancellationToken::new();
        let closing = close_outcomes.clone();
        let completer = supervise("completer", &health, policy, CancellationToken::new(), {
            move || {
                completer::run(
                    backend.clone(),
                    completer_rx.clone(),
                    batch,
                    lease,
                    promote.clone(),
                    closing.clone(),
                )
            }
        });
        let services = Services::new(&health, shared.stop_services.clone());
        let config = &shared.config;
        services.start(Listener::new(
            shared.backend.clone(),
            Arc::new(services::NodeWakeups(shared.clone())),
        ));
        services.start(Heartbeat::new(
            Arc::new(services::NodeBeat {
                shared: shared.clone(),
                row: crate::maintenance::NodeRow::new(),
            }),
            HeartbeatConfig::new(config.effective_heartbeat()),
        ));
        let backend = &shared.backend;
        services.start(Rescuer::new(
            backend.clone(),
            RescuerConfig::new(config.rescue_interval, config.node_dead_after),
        ));
        services.start(
            Promoter::new(backend.clone(), PromoterConfig::new(config.poll_interval))
                .woken_by(shared.promote.clone()),
        );
        services.start(Pruner::new(backend.clone(), config.housekeeping.clone()));
        services.start(Vacuumer::new(backend.clone(), config.housekeeping.clone()));
        if !self.periodic.is_empty() {
            services.start(services::Periodic {
                backend: backend.clone(),
                clock: config.clock.clone(),
                jobs: self.periodic,
                middleware: shared.workers.chain().clone(),
            });
        }
        let keeper = hold.map(|hold| tokio::spawn(liveness::keep(shared.clone(), hold)));
        let producer = tokio::spawn(producer::run(shared.clone()));
        tracing::info!(node = %shared.node.id, name = %shared.node.name, queues = ?shared.node.queues, concurrency, "runtime started");
        Ok(RuntimeHandle {
            shared,
            producer,
            completer,
            close_outcomes,
            services,
            health,
            keeper,
        })
    }
}

fn default_node_name() -> String {
    format!("{}:{}", crate::maintenance::host_name(), std::process::id())
}

/// A running runtime. Dropping it leaves the runtime running; call
/// [`RuntimeHandle::shutdown`] to stop.
#[derive(Debug)]
pub struct RuntimeHandle {
    shared: Arc<Shared>,
    producer: JoinHandle<()>,
    completer: JoinHandle<()>,
    /// Closes the completer's channel at shutdown: what was queued is written, nothing
    /// later is taken.
    close_outcomes: CancellationToken,
    services: Services,
    health: Health,
    /// Keeps the node's liveness lock, and gives it back when the services stop.
    keeper: Option<JoinHandle<Option<hopper_core::NodeHold>>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl RuntimeHandle {
    /// This node's id.
    pub fn node_id(&self) -> Uuid {
        self.shared.node.id
    }

    /// How many jobs are running on this node now.
    pub fn running(&self) -> usize {
        self.shared.running().len()
    }

    /// Whether every background task still runs (see [`crate::supervise`]).
    pub fn health(&self) -> Health {
        self.health.clone()
    }

    /// Waits for SIGINT or SIGTERM, or for a background task to give up (the runtime is
    /// then unhealthy: see [`RuntimeHandle::health`]), then shuts down gracefully; a second
    /// SIGINT or SIGTERM during the shutdown hands the running jobs back at once
    /// ([`RuntimeHandle::shutdown_until`]).
    pub async fn run_until_signal(self) {
        self.run_until(std::future::pending()).await;
    }

    /// [`RuntimeHandle::run_until_signal`] that also shuts down when `stop` resolves (the
    /// application's own reason to stop: its parent gone, an admin request).
    pub async fn run_until(self, stop: impl Future<Output = ()>) {
        tokio::select! {
            _ = shutdown_signal() => tracing::info!(
                "signal received; shutting down (a second SIGINT or SIGTERM hands the running \
                 jobs back at once)"
            ),
            failure = self.health.failed() => {
                tracing::error!(%failure, "the runtime is unhealthy; shutting down");
            }
            _ = stop => tracing::info!("asked to stop; shutting down"),
        }
        self.shutdown_until(shutdown_signal()).await;
    }

    /// Graceful shutdown: stops claiming, lets running jobs finish within the configured
    /// `shutdown_timeout`, hands the rest back (available at once, the attempt not
    /// counted), writes every outcome, and then deregisters the node.
    ///
    /// A handler stopped at the deadline is dropped at once, unless it never yields (it
    /// blocks its thread); one that has not handed its job back 5 s later is abandoned, and
    /// the node's deregistration releases its job as a dead node's (available at once, the
    /// attempt counted: docs/reliability.md), rather than leave it running, under a node
    /// nobody looks at, until its lease ends. So does the deregistration for an outcome
    /// that could not be written within 30 s.
    pub async fn shutdown(self) {
        let timeout = self.shared.config.shutdown_timeout;
        self.shutdown_within(timeout).await;
    }

    /// [`RuntimeHandle::shutdown`] with an explicit deadline for running jobs.
    pub async fn shutdown_within(self, timeout: Duration) {
        self.stop(tokio::time::sleep(timeout)).await;
    }

    /// [`RuntimeHandle::shutdown`] that stops waiting for the running jobs, and hands them
    /// back, as soon as `hurry` resolves if that comes before the `shutdown_timeout`: an
    /// operator's second Ctrl-C ([`shutdown_signal`]), an orchestrator's deadline drawing
    /// near. Logs, at info level, how many jobs it waits for and how long.
    pub async fn shutdown_until(self, hurry: impl Future<Output = ()>) {
        let timeout = self.shared.config.shutdown_timeout;
        let jobs = self.running();
        tracing::info!(
            "stopping: waiting up to {timeout:?} for {jobs} running job{} to finish, or until \
             asked again",
            if jobs == 1 { "" } else { "s" }
        );
        // Counted from now, as shutdown_within's.
        let sleep = tokio::time::sleep(timeout);
        let deadline = async move {
            tokio::select! {
                _ = sleep => {}
                _ = hurry => tracing::warn!("asked again to stop; handing the running jobs back now"),
            }
        };
        self.stop(deadline).await;
    }

    /// The shutdown: running jobs may finish until `deadline` resolves. The deadline is
    /// watched from the start, while the producer stops too (its claim may wait on a slow
    /// database), so that a second signal then is not missed.
    async fn stop(self, deadline: impl Future<Output = ()>) {
        let shared = self.shared;
        shared.stop_claiming.cancel();
        tokio::pin!(deadline);
        let mut producer = self.producer;
        let passed = tokio::select! {
            _ = &mut producer => false,
            _ = &mut deadline => true,
        };
        if passed {
            let _ = producer.await;
        }
        let all = u32::try_from(shared.config.concurrency.max(1)).unwrap_or(u32::MAX);
        let finished = !passed
            && tokio::select! {
                _ = shared.slots.acquire_many(all) => true,
                _ = &mut deadline => false,
            };
        if !finished {
            let running: Vec<JobId> = shared.running().keys().copied().collect();
            tracing::warn!(
                jobs = running.len(),
                "shutdown deadline passed; releasing running jobs"
            );
            for id in running {
                shared.running_stop(id, StopReason::Shutdown);
            }
            // Handlers are dropped at once; wait for their releases to be queued.
            let _ = tokio::time::timeout(RELEASE_WAIT, shared.slots.acquire_many(all)).await;
            let abandoned = shared.running().len();
            if abandoned > 0 {
                tracing::warn!(
                    jobs = abandoned,
                    "handlers still running {RELEASE_WAIT:?} after the shutdown deadline are \
                     abandoned; the node's deregistration releases their jobs (the attempt counts)"
                );
            }
        }
        // Outcomes first, the node's row after: the deregistration releases whatever still
        // runs under the node, so it must come once everything queued is written. The
        // heartbeat goes on meanwhile, so a slow write does not make the node look dead.
        self.close_outcomes.cancel();
        if tokio::time::timeout(OUTCOMES_WAIT, self.completer)
            .await
            .is_err()
        {
            tracing::error!(
                "outcomes could not be written within {OUTCOMES_WAIT:?}; the node's deregistration releases their jobs, which run again"
            );
        }
        self.services.stop().await;
        // The lock is given back last: while outcomes are still being written, other
        // nodes must not take this node for vanished.
        let hold = match self.keeper {
            Some(keeper) => keeper.await.ok().flatten(),
            None => None,
        };
        deregister(&shared.backend, shared.node.id).await;
        drop(hold);
        tracing::info!("runtime stopped");
    }
}

/// How long after the shutdown deadline a stopping runtime waits for its handlers to hand
/// their jobs back; those still running then are abandoned.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// How long a stopping runtime waits for its last outcomes to be written.
const OUTCOMES_WAIT: Duration = Duration::from_secs(30);

/// How long a stopping runtime waits for its node row's deletion.
const DEREGISTER_WAIT: Duration = Duration::from_secs(5);

/// Deregisters the node (releasing what still runs under it: [`Backend::node_deregister`]),
/// waiting for it at most [`DEREGISTER_WAIT`]: another transaction may hold the row (an
/// admin's `SELECT … FOR UPDATE` on `nodes`), and the stop must not wait as long as the
/// holder. Past the bound the deregistration goes on by itself, queued on the row, and the
/// other nodes would release and forget the node anyway once its liveness lock is free
/// (`node_release_dead.sql`). If it fails, the row stays, and the node is released as a
/// dead one: at once where its liveness lock says it is gone, else once its heartbeat has
/// been silent for `node_dead_after`.
async fn deregister(backend: &Arc<dyn Backend>, node: Uuid) {
    let backend = backend.clone();
    // The task says how it ended itself: it may end after the runtime stopped.
    let deletion = tokio::spawn(async move {
        let params = NodeDeregisterParams { node };
        if let Err(e) = backend.node_deregister(&params).await {
            tracing::warn!(error = %e.with_causes(), "deregistering the node failed");
        }
    });
    if tokio::time::timeout(DEREGISTER_WAIT, deletion)
        .await
        .is_err()
    {
        tracing::warn!(
            "the node's row was not deleted within {DEREGISTER_WAIT:?} (another transaction may hold it); stopping without waiting for it"
        );
    }
}

/// Resolves on SIGINT or SIGTERM (Ctrl-C elsewhere): the one signal wait shared by the
/// runtime, `hopper serve` and the HTTP server. Called within a tokio runtime, it listens
/// from the call on, so a signal that comes before the future is first polled (while the
/// caller logs or awaits something else) is not missed; called outside one, from its first
/// poll.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let listening = tokio::runtime::Handle::try_current().ok().map(|_| {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        )
    });
    async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let (interrupt, terminate) = listening.unwrap_or_else(|| {
                (
                    signal(SignalKind::interrupt()),
                    signal(SignalKind::terminate()),
                )
            });
            if let (Ok(mut interrupt), Ok(mut terminate)) = (interrupt, terminate) {
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                }
                return;
            }
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}
