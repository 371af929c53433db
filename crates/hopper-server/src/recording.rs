//! What `hopper serve` records of itself through the `metrics` facade (names in
//! `hopper::metrics`, described in `docs/metrics.md`): its peers and the orders they hold,
//! the outcomes its remote workers report and the hellos it refuses. Nothing is collected
//! unless the process installed a recorder (`hopper serve --http` installs Prometheus's;
//! with `otel`, OTLP's).

use hopper::metrics::{
    SERVER_HELLOS_REFUSED_TOTAL, SERVER_ORDERS, SERVER_OUTCOMES_TOTAL, SERVER_PEERS,
};
use hopper_core::Outcome;
use hopper_protocol::Role;

use crate::server::Peers;

/// Sets the gauges of the connected peers by role and of the orders they hold: a pass over
/// the peers, made once per heartbeat period.
pub(crate) fn peers_and_orders(peers: &Peers) {
    let (mut workers, mut clients, mut orders) = (0u64, 0u64, 0u64);
    for peer in peers.values() {
        match peer.role() {
            Role::Worker => workers += 1,
            Role::Client => clients += 1,
        }
        orders += u64::try_from(peer.held().len()).unwrap_or(u64::MAX);
    }
    // Gauges are f64; counts of peers and orders are far below 2^53.
    ::metrics::gauge!(SERVER_PEERS, "role" => "worker").set(workers as f64);
    ::metrics::gauge!(SERVER_PEERS, "role" => "client").set(clients as f64);
    ::metrics::gauge!(SERVER_ORDERS).set(orders as f64);
}

/// Counts an outcome of a remote worker, taken for writing. Each label a literal, so the
/// key is built once, not allocated per outcome (this runs for every job of W7).
pub(crate) fn outcome_taken(outcome: &Outcome) {
    let counter = match outcome {
        Outcome::Completed { .. } => {
            ::metrics::counter!(SERVER_OUTCOMES_TOTAL, "outcome" => "completed")
        }
        Outcome::Retry { .. } => ::metrics::counter!(SERVER_OUTCOMES_TOTAL, "outcome" => "retried"),
        Outcome::Failed { .. } => ::metrics::counter!(SERVER_OUTCOMES_TOTAL, "outcome" => "failed"),
        Outcome::Snoozed { .. } => {
            ::metrics::counter!(SERVER_OUTCOMES_TOTAL, "outcome" => "snoozed")
        }
        Outcome::Released => ::metrics::counter!(SERVER_OUTCOMES_TOTAL, "outcome" => "released"),
    };
    counter.increment(1);
}

/// Counts a hello refused for `reason` (`unauthorized`, `invalid`).
pub(crate) fn hello_refused(reason: &'static str) {
    ::metrics::counter!(SERVER_HELLOS_REFUSED_TOTAL, "reason" => reason).increment(1);
}
