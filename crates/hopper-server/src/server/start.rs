//! Starting the server: its node's liveness, the transport, the maintenance services and
//! the loop's state, then the loop itself ([`super::run`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use hopper::Health;
use hopper::maintenance::{
    Heartbeat, HeartbeatConfig, Listener, Promoter, PromoterConfig, Pruner, Rescuer, RescuerConfig,
    Services, Vacuumer,
};
use hopper::supervise::{Policy, supervise};
use hopper_core::log_limit::LogThrottle;
use tokio::sync::{Mutex, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::in_flight::{
    InFlight, MAX_REQUESTS_IN_FLIGHT, MAX_REQUESTS_PER_PEER, executing_for_peers,
    executing_per_peer,
};
use crate::log_writer;
use crate::outcome_writer;
use crate::tasks;
use crate::{ServeConfig, ServeError, ServerHandle};

use super::{Core, Peers, run};

/// Refused hellos (and requests before hello) are logged at most once per this interval,
/// with the count held back.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Starts a server on `config`: takes its node's liveness, binds its endpoint, starts the
/// maintenance services and the writers, and spawns the loop.
pub(crate) async fn start(config: ServeConfig) -> std::result::Result<ServerHandle, ServeError> {
    let backend = config.backend.clone();
    let node_id = config.node_id;
    let stop = CancellationToken::new();
    let fenced = Arc::new(AtomicBool::new(false));
    let node = tasks::node_info(&config, &Peers::default());
    let hold = crate::liveness::start(&backend, node.clone(), fenced.clone(), &stop).await?;
    // Should binding fail below, the lock's keeper stops and gives the lock back.
    let stop_on_error = stop.clone().drop_guard();
    let (node, node_rx) = watch::channel(node);
    let bind_error = |reason: String| ServeError::Bind {
        endpoint: config.listen.clone(),
        reason,
    };
    crate::exposure::check(&config).map_err(bind_error)?;
    let (events_tx, events_rx) = mpsc::channel(4096);
    let (out_tx, out_rx) = mpsc::channel(4096);
    let settings = crate::transport::Settings {
        listen: config.listen.clone(),
        // Frames up to twice the limit are read, so that the peer gets a `too_large` reply.
        max_message: config.max_frame.saturating_mul(2).saturating_add(4096),
        handshake_timeout: config.handshake_timeout,
        max_connections: config.max_connections,
        curve: config.curve.clone(),
    };
    let bound = crate::transport::start(&settings, events_tx.clone(), out_rx, stop.clone())
        .map_err(bind_error)?;
    let endpoint = bound.endpoint;
    let frames = bound.frames;
    let (finish_tx, finish_rx) = mpsc::channel(8192);
    // Each queued `log` holds a request permit, so this channel never fills.
    let (logs_tx, logs_rx) = mpsc::channel(MAX_REQUESTS_IN_FLIGHT);
    let curve = config.curve.is_some();
    let core = Core {
        backend: backend.clone(),
        peers: Peers::default(),
        out: out_tx.clone(),
        events: events_tx.clone(),
        finisher: finish_tx,
        logs: logs_tx,
        hot: HashMap::new(),
        claiming: false,
        claim_woken: false,
        next_queue: 0,
        inherit_at: Some(Instant::now() + inherit_after(&config)),
        seen: Some(HashSet::new()),
        requests: InFlight::new(
            MAX_REQUESTS_IN_FLIGHT,
            MAX_REQUESTS_PER_PEER,
            executing_per_peer(config.pool_size),
            executing_for_peers(config.pool_size),
        ),
        extending: HashSet::new(),
        writing: HashSet::new(),
        log_checks: HashMap::new(),
        refusals: LogThrottle::new(REFUSAL_LOG_INTERVAL),
        early_refusals: LogThrottle::new(REFUSAL_LOG_INTERVAL),
        frame_refusals: LogThrottle::new(REFUSAL_LOG_INTERVAL),
        foreign_refusals: LogThrottle::new(REFUSAL_LOG_INTERVAL),
        active: HashSet::new(),
        poll_turn: 0,
        reprobing: false,
        fenced: fenced.clone(),
        node,
        config,
    };
    let health = Health::new();
    let services = Services::new(&health, stop.clone());
    let config = &core.config;
    services.start(Heartbeat::new(
        Arc::new(tasks::NodeBeat {
            backend: backend.clone(),
            node: node_rx,
            fenced,
            row: hopper::maintenance::NodeRow::new(),
        }),
        HeartbeatConfig::new(config.heartbeat),
    ));
    services.start(Rescuer::new(
        backend.clone(),
        RescuerConfig::new(Duration::from_secs(1), config.node_dead_after),
    ));
    services.start(Promoter::new(
        backend.clone(),
        PromoterConfig::new(config.poll_interval),
    ));
    services.start(Pruner::new(backend.clone(), config.housekeeping.clone()));
    services.start(Vacuumer::new(backend.clone(), config.housekeeping.clone()));
    services.start(Listener::new(
        backend.clone(),
        Arc::new(tasks::LoopWakeups(events_tx.clone())),
    ));
    let mut tasks = vec![
        supervised("log_writer", &health, &stop, {
            let (backend, logs_rx) = (backend.clone(), Arc::new(Mutex::new(logs_rx)));
            let out = out_tx.clone();
            move || log_writer::store_logs(backend.clone(), logs_rx.clone(), out.clone())
        }),
        supervised("outcome_writer", &health, &stop, {
            let (backend, finish_rx) = (backend.clone(), Arc::new(Mutex::new(finish_rx)));
            let (events, lease) = (events_tx.clone(), config.lease);
            move || {
                let (backend, items) = (backend.clone(), finish_rx.clone());
                let (out, events) = (out_tx.clone(), events.clone());
                outcome_writer::finish(backend, items, out, events, 3, lease)
            }
        }),
        tokio::spawn(run(core, events_rx, frames, stop.clone())),
    ];
    tasks.extend(bound.tasks);
    stop_on_error.disarm();
    tracing::info!(%endpoint, node = %node_id, curve, "hopper server listening");
    Ok(ServerHandle {
        endpoint,
        node_id,
        stop,
        tasks,
        services,
        health,
        hold,
    })
}

/// Spawns a maintenance task under [`hopper::supervise`]: restarted when it panics,
/// reported to `health` when it keeps failing.
fn supervised<F, Fut>(
    name: &'static str,
    health: &Health,
    stop: &CancellationToken,
    task: F,
) -> tokio::task::JoinHandle<()>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future + Send + 'static,
    Fut::Output: hopper::supervise::TaskEnd,
{
    supervise(name, health, Policy::default(), stop.clone(), task)
}

/// How long after starting the server releases the jobs an earlier run of it leased that
/// no reconnected worker claimed: five heartbeat periods (time for workers to notice the
/// restart and say hello again), or half the lease if that is shorter, so that they go
/// back uncounted before their leases (last renewed by the old run) expire and count.
fn inherit_after(config: &ServeConfig) -> Duration {
    (config.heartbeat * 5).min(config.lease / 2)
}
