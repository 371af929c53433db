//! The runtime's settings, with documented defaults.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hopper_core::limits::{check_count, check_duration, check_interval, check_node_timeout};
use hopper_core::{Clock, Error, Result, SystemClock};

use crate::maintenance::Housekeeping;

/// How a [`crate::Runtime`] runs. Every field has a default; see [`RuntimeConfig::default`].
/// Built from the default with the `with_*` methods (or by setting its fields);
/// `#[non_exhaustive]`, so a new setting is not a breaking change. A setting the runtime
/// cannot run with is refused when it starts ([`RuntimeConfig::check`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RuntimeConfig {
    /// Queues to claim from. Default: `["default"]`.
    pub queues: Vec<String>,
    /// How this runtime's slots are shared between its queues when several have work:
    /// each queue's share is its weight over the sum of the weights (a queue not listed
    /// weighs 1). Work-conserving: slots a queue leaves unused go to the others. Default:
    /// empty (equal shares).
    pub queue_weights: HashMap<String, u32>,
    /// Jobs run at once at most. Default: 10.
    pub concurrency: usize,
    /// Lease granted per claim (capped by each job's timeout) and renewed while a job runs.
    /// A crashed worker's jobs come back at most this long after its last renewal.
    /// Default: 30 s.
    pub lease: Duration,
    /// Longest wait between claims when no notification arrives. Default: 1 s.
    pub poll_interval: Duration,
    /// How often the node heartbeats and renews its leases. Default: 5 s (and at most a
    /// third of `lease`).
    pub heartbeat_interval: Duration,
    /// A node silent this long is dead and its jobs are released. Default: 30 s. Where the
    /// backend tracks node liveness (PostgreSQL, a SQLite file), a crashed node's jobs are
    /// released sooner, as soon as its liveness lock is free (docs/reliability.md).
    pub node_dead_after: Duration,
    /// How often expired leases and dead nodes are looked for. Default: 1 s.
    pub rescue_interval: Duration,
    /// Most jobs claimed in one statement. Default: 2,000: fewer, larger claims (one
    /// commit and one walk of the index head for more jobs) drain short jobs faster
    /// (`docs/benchmarks.md`). The claims stay sized to what is missing, and the prefetch to
    /// the jobs' pace, so slow jobs are not hoarded.
    pub claim_batch: usize,
    /// Claimed jobs a runtime serving one queue keeps on hand beyond its free slots, so
    /// that each claim carries more jobs and claims overlap running ones (measured in
    /// `docs/benchmarks.md`). Their leases are renewed while they wait. `Some(0)` claims
    /// only for free slots, as runtimes serving several queues always do (to keep the
    /// shares by weight exact). Default: `None`, sized to the jobs' pace: as many as the
    /// slots start in 10 ms at the mean duration of the jobs this node ran, at least twice
    /// `concurrency` (the figure before any job ran, and for jobs of 5 ms or more at
    /// concurrency 50), at most `claim_batch`. No-op jobs get a full batch on hand; slow
    /// jobs are not hoarded on one node.
    pub prefetch: Option<usize>,
    /// Claims a runtime serving one queue keeps in flight at once (at least 1). While one
    /// claim waits for its commit, the next is already running: the database works on
    /// both at once (two cores, one group commit), which a single claim loop cannot use.
    /// Each claim asks for an equal share of what is missing, but for at least a whole
    /// `claim_batch` while that many are missing: with a large prefetch, one claim of 1,000
    /// drained faster than two of 500, and two faster than four of 250 (fewer claims
    /// stepping over each other's locked rows). Default: 4.
    pub claims_in_flight: usize,
    /// Most outcomes written in one statement. Default: 1,000.
    pub complete_batch: usize,
    /// Threads of work at once in [`crate::JobContext::blocking`]. Default: 16.
    pub blocking_threads: usize,
    /// How long a graceful shutdown lets running jobs finish before releasing them.
    /// Default: 30 s.
    pub shutdown_timeout: Duration,
    /// A human name for this node. Default: `host:pid`.
    pub node_name: Option<String>,
    /// Retention and vacuuming of the job table on this node: how long finished jobs are
    /// kept, how often they are pruned, how often the table's need for a vacuum is checked
    /// (every node runs both; one at a time acts). Default: [`Housekeeping::default`]
    /// (completed jobs kept 24 h, failed 7 days, pruned every 60 s; a vacuum check every
    /// 10 s).
    pub housekeeping: Housekeeping,
    /// "Now" for what the runtime decides itself rather than in SQL: when periodic jobs are
    /// due. Default: [`SystemClock`], this host's clock. Tests pass the backend's
    /// [`hopper_core::TestClock`] here too, and move both by hand.
    pub clock: Arc<dyn Clock>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            queues: vec![hopper_core::DEFAULT_QUEUE.to_owned()],
            queue_weights: HashMap::new(),
            concurrency: 10,
            lease: Duration::from_secs(30),
            poll_interval: Duration::from_secs(1),
            heartbeat_interval: Duration::from_secs(5),
            node_dead_after: Duration::from_secs(30),
            rescue_interval: Duration::from_secs(1),
            claim_batch: 2000,
            prefetch: None,
            claims_in_flight: 4,
            complete_batch: 1000,
            blocking_threads: 16,
            shutdown_timeout: Duration::from_secs(30),
            node_name: None,
            housekeeping: Housekeeping::default(),
            clock: Arc::new(SystemClock),
        }
    }
}

impl RuntimeConfig {
    /// The shortest lease a runtime takes: renewed every third of it, at most every 10 ms.
    pub const MIN_LEASE: Duration = Duration::from_millis(30);

    /// Refuses, with an [`Error::InvalidInput`] that names the setting, what a runtime
    /// cannot run with ([`crate::Runtime::start`] calls it): no queue, or an invalid queue
    /// name; a duration past [`hopper_core::limits::MAX_DURATION`] (ten years); a zero
    /// `poll_interval` or `rescue_interval` (the database queried without pause); a
    /// `lease` under [`RuntimeConfig::MIN_LEASE`]; a `node_dead_after` under twice the
    /// heartbeat (live nodes would be taken for dead between their beats); a count past
    /// [`hopper_core::limits::MAX_COUNT`] (a million); `housekeeping` that
    /// [`Housekeeping::check`] refuses. A count of zero is read as one.
    pub fn check(&self) -> Result<()> {
        if self.queues.is_empty() {
            return Err(Error::InvalidInput(
                "a runtime needs at least one queue to claim from".into(),
            ));
        }
        for queue in &self.queues {
            hopper_core::job::validate_name("queue", queue)?;
        }
        let durations = [
            ("lease", self.lease),
            ("poll_interval", self.poll_interval),
            ("heartbeat_interval", self.heartbeat_interval),
            ("node_dead_after", self.node_dead_after),
            ("rescue_interval", self.rescue_interval),
            ("shutdown_timeout", self.shutdown_timeout),
        ];
        for (name, duration) in durations {
            check_duration(name, duration)?;
        }
        check_interval("poll_interval", self.poll_interval)?;
        check_interval("rescue_interval", self.rescue_interval)?;
        if self.lease < Self::MIN_LEASE {
            return Err(Error::InvalidInput(format!(
                "a lease of {:?} is too short: at least {:?} (it is renewed every third of it, at most every 10 ms)",
                self.lease,
                Self::MIN_LEASE
            )));
        }
        check_node_timeout(self.effective_heartbeat(), self.node_dead_after)?;
        let counts = [
            ("concurrency", self.concurrency),
            ("claim_batch", self.claim_batch),
            ("prefetch", self.prefetch.unwrap_or(0)),
            ("claims_in_flight", self.claims_in_flight),
            ("complete_batch", self.complete_batch),
            ("blocking_threads", self.blocking_threads),
        ];
        for (name, count) in counts {
            check_count(name, count)?;
        }
        self.housekeeping.check()
    }

    /// The weight of `queue` (1 when not listed, at least 1).
    pub(crate) fn weight(&self, queue: &str) -> u32 {
        self.queue_weights.get(queue).copied().unwrap_or(1).max(1)
    }

    /// The heartbeat period actually used: never more than a third of the lease.
    pub(crate) fn effective_heartbeat(&self) -> Duration {
        self.heartbeat_interval
            .min(self.lease / 3)
            .max(Duration::from_millis(10))
    }
}

/// Builders, one per field, so that a new setting is not a breaking change:
/// `RuntimeConfig::default().with_queues(["emails"]).with_concurrency(50)`.
impl RuntimeConfig {
    /// With these queues to claim from.
    pub fn with_queues<Q: Into<String>>(self, queues: impl IntoIterator<Item = Q>) -> Self {
        let queues = queues.into_iter().map(Into::into).collect();
        RuntimeConfig { queues, ..self }
    }

    /// With these weights of queues (a queue not listed weighs 1).
    pub fn with_queue_weights<Q: Into<String>>(
        self,
        weights: impl IntoIterator<Item = (Q, u32)>,
    ) -> Self {
        let queue_weights = weights.into_iter().map(|(q, w)| (q.into(), w)).collect();
        RuntimeConfig {
            queue_weights,
            ..self
        }
    }

    /// With at most `concurrency` jobs running at once.
    pub fn with_concurrency(self, concurrency: usize) -> Self {
        RuntimeConfig {
            concurrency,
            ..self
        }
    }

    /// With this lease per claim.
    pub fn with_lease(self, lease: Duration) -> Self {
        RuntimeConfig { lease, ..self }
    }

    /// With this longest wait between claims when no notification arrives.
    pub fn with_poll_interval(self, poll_interval: Duration) -> Self {
        RuntimeConfig {
            poll_interval,
            ..self
        }
    }

    /// With this heartbeat and lease-renewal period.
    pub fn with_heartbeat_interval(self, heartbeat_interval: Duration) -> Self {
        RuntimeConfig {
            heartbeat_interval,
            ..self
        }
    }

    /// With nodes silent this long declared dead.
    pub fn with_node_dead_after(self, node_dead_after: Duration) -> Self {
        RuntimeConfig {
            node_dead_after,
            ..self
        }
    }

    /// With expired leases and dead nodes looked for this often.
    pub fn with_rescue_interval(self, rescue_interval: Duration) -> Self {
        RuntimeConfig {
            rescue_interval,
            ..self
        }
    }

    /// With at most `claim_batch` jobs claimed in one statement.
    pub fn with_claim_batch(self, claim_batch: usize) -> Self {
        RuntimeConfig {
            claim_batch,
            ..self
        }
    }

    /// With a fixed prefetch (`0`: claim only for free slots), or with `None` the one sized
    /// to the jobs' pace.
    pub fn with_prefetch(self, prefetch: impl Into<Option<usize>>) -> Self {
        RuntimeConfig {
            prefetch: prefetch.into(),
            ..self
        }
    }

    /// With this many claims in flight at once.
    pub fn with_claims_in_flight(self, claims_in_flight: usize) -> Self {
        RuntimeConfig {
            claims_in_flight,
            ..self
        }
    }

    /// With at most `complete_batch` outcomes written in one statement.
    pub fn with_complete_batch(self, complete_batch: usize) -> Self {
        RuntimeConfig {
            complete_batch,
            ..self
        }
    }

    /// With this many threads for [`crate::JobContext::blocking`].
    pub fn with_blocking_threads(self, blocking_threads: usize) -> Self {
        RuntimeConfig {
            blocking_threads,
            ..self
        }
    }

    /// With this much time for running jobs to finish at a graceful shutdown.
    pub fn with_shutdown_timeout(self, shutdown_timeout: Duration) -> Self {
        RuntimeConfig {
            shutdown_timeout,
            ..self
        }
    }

    /// With this human name for the node.
    pub fn with_node_name(self, node_name: impl Into<String>) -> Self {
        RuntimeConfig {
            node_name: Some(node_name.into()),
            ..self
        }
    }

    /// With this retention and vacuuming.
    pub fn with_housekeeping(self, housekeeping: Housekeeping) -> Self {
        RuntimeConfig {
            housekeeping,
            ..self
        }
    }

    /// With this clock for periodic jobs.
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        RuntimeConfig { clock, ..self }
    }
}
