//! Every metric hopper exports, named in one place.
//!
//! The runtime and the client record through the [`metrics`](https://docs.rs/metrics)
//! facade only: nothing is collected unless the application installs a recorder (for
//! example `hopper_web::metrics::install_recorder`, which exports them for Prometheus).
//! The queue gauges are not recorded here: they are read from the database at scrape time
//! by `hopper-web`, so they are right however many processes run workers.
//!
//! `docs/metrics.md` describes each metric; keep the two in step.
//!
//! | name | type | labels | recorded |
//! | --- | --- | --- | --- |
//! | [`JOBS_ENQUEUED_TOTAL`] | counter | queue, kind | by [`crate::Client`] after an insert commits |
//! | [`JOBS_COMPLETED_TOTAL`] | counter | queue, kind | by the executor, handler succeeded |
//! | [`JOBS_RETRIED_TOTAL`] | counter | queue, kind | by the executor, attempt failed, will run again |
//! | [`JOBS_FAILED_TOTAL`] | counter | queue, kind | by the executor, job dead-lettered |
//! | [`JOB_START_LATENCY_SECONDS`] | histogram | queue, kind | by the executor, due → start |
//! | [`JOB_DURATION_SECONDS`] | histogram | queue, kind | by the executor, run time of an attempt |
//! | [`JOBS`] | gauge | queue, state | by `hopper-web` at scrape time |
//! | [`QUEUE_OLDEST_AVAILABLE_SECONDS`] | gauge | queue | by `hopper-web` at scrape time |
//! | [`OUTCOMES_REFUSED_TOTAL`] | counter | | by [`crate::outcomes`], an outcome refused for a permanent reason |
//! | [`OUTCOMES_HELD_TOTAL`] | counter | | by [`crate::outcomes`], an outcome write answered held (its job row held by another transaction) |
//! | [`TASK_FAILURES_TOTAL`] | counter | task | by [`crate::supervise`], a background task panicked or failed |
//! | [`SERVER_PEERS`] | gauge | role | by `hopper serve`, every heartbeat period |
//! | [`SERVER_ORDERS`] | gauge | | by `hopper serve`, every heartbeat period |
//! | [`SERVER_OUTCOMES_TOTAL`] | counter | outcome | by `hopper serve`, an outcome of a remote worker taken |
//! | [`SERVER_HELLOS_REFUSED_TOTAL`] | counter | reason | by `hopper serve`, a hello refused |
//! | [`HTTP_CONNECTIONS`] | gauge | | by `hopper-web`'s server, connections open now |
//! | [`HTTP_CONNECTIONS_CLOSED_TOTAL`] | counter | reason | by `hopper-web`'s server, a connection ended |

use std::collections::HashMap;
use std::sync::{OnceLock, PoisonError, RwLock};
use std::time::Duration;

use metrics::{Key, Label, Metadata};

/// Counter: jobs inserted through [`crate::Client`] (single and bulk), by queue and kind.
/// Jobs enqueued inside the caller's transaction (whose commit hopper does not see) or from
/// SQL (`hopper.enqueue`) are not counted.
pub const JOBS_ENQUEUED_TOTAL: &str = "hopper_jobs_enqueued_total";

/// Counter: attempts whose handler succeeded, by queue and kind.
pub const JOBS_COMPLETED_TOTAL: &str = "hopper_jobs_completed_total";

/// Counter: attempts that failed and will be tried again after a backoff, by queue and kind.
pub const JOBS_RETRIED_TOTAL: &str = "hopper_jobs_retried_total";

/// Counter: jobs dead-lettered (attempts exhausted or permanent failure), by queue and kind.
pub const JOBS_FAILED_TOTAL: &str = "hopper_jobs_failed_total";

/// Histogram: seconds from a job being due (`run_at`) to its attempt starting on a worker.
pub const JOB_START_LATENCY_SECONDS: &str = "hopper_job_start_latency_seconds";

/// Histogram: seconds one attempt's handler ran, whatever its outcome.
pub const JOB_DURATION_SECONDS: &str = "hopper_job_duration_seconds";

/// Gauge: jobs by queue and state, read from the database at scrape time.
pub const JOBS: &str = "hopper_jobs";

/// Gauge: age in seconds of the oldest available job of a queue (0 when none), read from
/// the database at scrape time.
pub const QUEUE_OLDEST_AVAILABLE_SECONDS: &str = "hopper_queue_oldest_available_seconds";

/// Counter: failures (panics or errors) of supervised background tasks, by task name
/// (`promoter`, `completer`, ...). Each is logged at error level; see [`crate::supervise`].
pub const TASK_FAILURES_TOTAL: &str = "hopper_task_failures_total";

/// Gauge: peers of `hopper serve` that said hello and are connected, by `role` (`worker`,
/// `client`). Set every heartbeat period.
pub const SERVER_PEERS: &str = "hopper_server_peers";

/// Gauge: orders (jobs) `hopper serve` has given its connected workers and not yet had an
/// outcome for. Set every heartbeat period.
pub const SERVER_ORDERS: &str = "hopper_server_orders";

/// Counter: outcomes `hopper serve` took from its remote workers (Rust, Python, Node) and
/// queued for writing, by `outcome` (`completed`, `retried`, `failed`, `snoozed`,
/// `released`). A second outcome for one lease, or one for a job another peer holds, is not
/// counted. The only job counts of Python and Node workers, which record no metrics of
/// their own; a Rust remote runtime also counts its attempts in its own process.
pub const SERVER_OUTCOMES_TOTAL: &str = "hopper_server_outcomes_total";

/// Counter: hellos `hopper serve` refused, by `reason` (`unauthorized`: a bad or missing
/// token, or a client token saying hello as a worker; `invalid`: a version or registration
/// it cannot take).
pub const SERVER_HELLOS_REFUSED_TOTAL: &str = "hopper_server_hellos_refused_total";

/// Gauge: connections the HTTP server (`hopper-web`, `hopper serve --http`) holds open now,
/// a TLS handshake in progress included; at most its connection limit.
pub const HTTP_CONNECTIONS: &str = "hopper_http_connections";

/// Counter: connections the HTTP server ended, by `reason`: `done` (the peer closed it, or
/// asked for it to be closed after a response), `header_timeout` (no request headers in
/// time, or idle too long between requests), `tls_handshake` (a TLS handshake that failed
/// or took too long), `send_timeout` (the peer took none of a response for the send
/// timeout: it stopped reading), `error` (anything else: a reset, a malformed request).
pub const HTTP_CONNECTIONS_CLOSED_TOTAL: &str = "hopper_http_connections_closed_total";

/// Counter: outcomes not written because the database refused them for a permanent
/// reason, or because a delay was over the bound (see [`crate::outcomes`]). Their jobs run
/// again once their lease expires.
pub const OUTCOMES_REFUSED_TOTAL: &str = "hopper_outcomes_refused_total";

/// Counter: outcome writes answered held: another transaction held the job's row (a
/// `SELECT … FOR UPDATE`, a change left uncommitted), so the outcome was kept aside to be
/// written again once the row is free, its lease renewed meanwhile (see
/// [`crate::outcomes`]). Each try counts: a hold of a few seconds counts an outcome a few
/// times. Anything but zero means some application or operator keeps job rows locked.
pub const OUTCOMES_HELD_TOTAL: &str = "hopper_outcomes_held_total";

/// Counts `n` outcome writes answered held.
pub(crate) fn outcomes_held(n: usize) {
    metrics::counter!(OUTCOMES_HELD_TOTAL).increment(u64::try_from(n).unwrap_or(u64::MAX));
}

/// Counts one refused outcome.
pub(crate) fn outcome_refused() {
    metrics::counter!(OUTCOMES_REFUSED_TOTAL).increment(1);
}

/// Counts one failure of the supervised task `task`.
pub(crate) fn task_failed(task: &'static str) {
    metrics::counter!(TASK_FAILURES_TOTAL, "task" => task).increment(1);
}

/// The histograms, for recorders that need them declared (Prometheus buckets).
pub const HISTOGRAMS: [&str; 2] = [JOB_START_LATENCY_SECONDS, JOB_DURATION_SECONDS];

/// Bucket bounds in seconds suited to both histograms: from 1 ms to 1 hour.
pub const HISTOGRAM_BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0, 300.0,
    3600.0,
];

/// Counts `n` jobs enqueued to `queue` of `kind`.
pub(crate) fn enqueued(queue: &str, kind: &str, n: u64) {
    metrics::counter!(JOBS_ENQUEUED_TOTAL, "queue" => queue.to_owned(), "kind" => kind.to_owned())
        .increment(n);
}

/// What one attempt came to, as the executor sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AttemptEnd {
    Completed,
    Retried,
    Failed,
}

/// Records that an attempt started `latency` after its job was due.
pub(crate) fn started(queue: &str, kind: &str, latency: Duration) {
    with_keys(queue, kind, |keys| {
        metrics::with_recorder(|r| {
            r.register_histogram(&keys.start_latency, &METADATA)
                .record(latency.as_secs_f64());
        });
    });
}

/// Records how an attempt ended and how long it ran.
pub(crate) fn finished(queue: &str, kind: &str, end: AttemptEnd, ran: Duration) {
    with_keys(queue, kind, |keys| {
        let counter = match end {
            AttemptEnd::Completed => &keys.completed,
            AttemptEnd::Retried => &keys.retried,
            AttemptEnd::Failed => &keys.failed,
        };
        metrics::with_recorder(|r| {
            r.register_counter(counter, &METADATA).increment(1);
            r.register_histogram(&keys.duration, &METADATA)
                .record(ran.as_secs_f64());
        });
    });
}

/// What the attempt metrics are recorded with, as the `metrics` macros would say it.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

/// The keys of the attempt metrics of one queue and kind. The `metrics` macros build a key
/// (its two label strings and its hash) at every call: three times per attempt. These are
/// built once per queue and kind and lent to the recorder, which is still asked at every
/// call, so a recorder installed after the runtime started sees the attempts.
struct JobKeys {
    start_latency: Key,
    completed: Key,
    retried: Key,
    failed: Key,
    duration: Key,
}

impl JobKeys {
    fn new(queue: &str, kind: &str) -> Self {
        let key = |name: &'static str| {
            Key::from_parts(
                name,
                vec![
                    Label::new("queue", queue.to_owned()),
                    Label::new("kind", kind.to_owned()),
                ],
            )
        };
        JobKeys {
            start_latency: key(JOB_START_LATENCY_SECONDS),
            completed: key(JOBS_COMPLETED_TOTAL),
            retried: key(JOBS_RETRIED_TOTAL),
            failed: key(JOBS_FAILED_TOTAL),
            duration: key(JOB_DURATION_SECONDS),
        }
    }
}

/// Queues and kinds whose keys are kept: past them (kinds are whatever the stored jobs
/// say), keys are built per call again.
const KEPT_KEYS: usize = 1024;

/// The kept keys, by queue and then kind, and how many pairs there are.
type KeptKeys = (HashMap<String, HashMap<String, JobKeys>>, usize);

static KEYS: OnceLock<RwLock<KeptKeys>> = OnceLock::new();

/// Runs `record` with the keys of `queue` and `kind`.
fn with_keys(queue: &str, kind: &str, record: impl FnOnce(&JobKeys)) {
    let kept = KEYS.get_or_init(RwLock::default);
    {
        let read = kept.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(keys) = read.0.get(queue).and_then(|kinds| kinds.get(kind)) {
            return record(keys);
        }
    }
    let mut write = kept.write().unwrap_or_else(PoisonError::into_inner);
    let (map, pairs) = &mut *write;
    if *pairs >= KEPT_KEYS {
        drop(write);
        return record(&JobKeys::new(queue, kind));
    }
    let kinds = map.entry(queue.to_owned()).or_default();
    if !kinds.contains_key(kind) {
        kinds.insert(kind.to_owned(), JobKeys::new(queue, kind));
        *pairs += 1;
    }
    if let Some(keys) = kinds.get(kind) {
        record(keys);
    }
}
