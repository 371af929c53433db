//! Where a plain claim starts reading `jobs_claim_idx`: at its head, or after the last key
//! this process claimed from the queue, while walking the head has turned slow.
//!
//! Every claim leaves dead entries at the head of the claim index (the claimed rows left
//! `available`). Vacuum and index-tuple killing remove them, unless something pins the
//! database's xmin horizon (a long transaction, a replication slot, autovacuum off and no
//! vacuumer): then every claim walks all of them, and the claim rate collapses
//! (docs/reliability.md, "Pinned xmin"). The claims of one queue therefore remember the
//! greatest key they took, and when head claims turn slow they continue after it, where
//! the live entries are, with a head claim now and then for the jobs that sort before it.
//!
//! The order each mode gives, as `docs/ARCHITECTURE.md` states it:
//!
//! - **head** (the default, and whenever head claims are fast): every claim reads from the
//!   head, in strict (priority, run_at, id) order;
//! - **after the cursor** (entered when [`ClaimCursorConfig::slow_heads`] head claims in a
//!   row each spent at least [`ClaimCursorConfig::slow_head`] in the database): claims read
//!   only keys after the cursor, still in order among those; one claim every
//!   [`ClaimCursorConfig::head_every`], or [`CLAIM_HEAD_SPACING`] times the last head claim's
//!   duration if longer (never two at once), reads from the head again, so a job that sorts
//!   before the cursor (a higher priority enqueued later, a retry or a promoted scheduled
//!   job whose `run_at` is past, a released job) waits at most that gap plus one head claim,
//!   as long as the process is claiming. The first head claim faster than `slow_head`
//!   returns the queue to head claims.
//!
//! The cursor is this process's: other processes' claims are not in it (a claim after it
//! steps over what they claimed since, which is what a head claim would do too).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use hopper_core::{ClaimedJob, JobId};

/// When plain claims leave the head of the claim index, and how often they come back to it.
/// See [`crate::PgBackend::set_claim_cursor`]. [`ClaimCursorConfig::default`] gives the
/// documented defaults, the `with_*` methods change them; `#[non_exhaustive]`, so a new
/// setting is not a breaking change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaimCursorConfig {
    /// A head claim that spent at least this long in the database (its statement's own
    /// clock, commit not included; for a claim that found nothing, the round trip) counts as
    /// slow. Default 20 ms: a claim of 100 jobs on a
    /// clean index takes 1-5 ms; with 100,000 dead entries at the head, 100-200 ms.
    /// `Duration::MAX` keeps every claim at the head.
    pub slow_head: Duration,
    /// This many slow head claims in a row switch the queue to claims after the cursor.
    /// Default 3, so that one claim slowed by a busy machine does not.
    pub slow_heads: u32,
    /// While claims start after the cursor, a head claim starts this long after the last
    /// one started (default 1 s), or [`CLAIM_HEAD_SPACING`] times as long as the last one took if
    /// that is longer: the bound on how long a job that sorts before the cursor waits.
    pub head_every: Duration,
}

impl Default for ClaimCursorConfig {
    fn default() -> Self {
        ClaimCursorConfig {
            slow_head: Duration::from_millis(20),
            slow_heads: 3,
            head_every: Duration::from_secs(1),
        }
    }
}

impl ClaimCursorConfig {
    /// With head claims this slow counting as slow (`Duration::MAX`: always at the head).
    pub fn with_slow_head(self, slow_head: Duration) -> Self {
        ClaimCursorConfig { slow_head, ..self }
    }

    /// With this many slow head claims in a row moving claims after the cursor.
    pub fn with_slow_heads(self, slow_heads: u32) -> Self {
        ClaimCursorConfig { slow_heads, ..self }
    }

    /// With a head claim at least this long after the last one.
    pub fn with_head_every(self, head_every: Duration) -> Self {
        ClaimCursorConfig { head_every, ..self }
    }
}

/// While claims start after the cursor, the head claims that keep order among them take at
/// most one part in this many of one connection's time: the gap between two head claims is
/// at least this many times the last one's duration. With the horizon pinned for minutes the
/// head walk grows to seconds (2.5 s after 5 minutes at 15,000 jobs/s), and a head claim
/// every second would keep one backend walking dead entries all the time.
pub const CLAIM_HEAD_SPACING: u32 = 5;

/// A position in the order of `jobs_claim_idx` within one queue. The field order makes the
/// derived ordering that of the index (uuids compare bytewise in both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Key {
    pub(crate) priority: i16,
    pub(crate) run_at: DateTime<Utc>,
    pub(crate) id: JobId,
}

impl Key {
    fn of(job: &ClaimedJob) -> Self {
        Key {
            priority: job.priority.0,
            run_at: job.run_at,
            id: job.lease.job_id,
        }
    }
}

/// Where one claim starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// At the head of the index. `probe`: the periodic head claim of a queue whose claims
    /// start after the cursor (its speed decides whether the queue goes back to the head).
    Head { probe: bool },
    /// After this key.
    After(Key),
}

/// Which way a queue's claims start now (for tests and diagnostics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimStartMode {
    /// From the head of the claim index: strict order.
    Head,
    /// After the last claimed key, with a head claim every `head_every`.
    AfterCursor,
}

/// One queue's cursor and mode.
#[derive(Debug, Default)]
struct QueueCursor {
    /// The greatest key claimed (see [`Cursors::finish`] for when it moves back).
    last: Option<Key>,
    /// Slow head claims in a row.
    slow_heads: u32,
    /// Set while claims start after the cursor: when the last head claim started.
    last_head: Option<DateTime<Utc>>,
    /// A head claim of this mode is running.
    head_in_flight: bool,
    /// How long the last head claim of this mode took.
    head_took: Duration,
}

/// The cursors of every queue this process claims from.
#[derive(Debug, Default)]
pub(crate) struct Cursors {
    config: Mutex<ClaimCursorConfig>,
    queues: Mutex<HashMap<String, QueueCursor>>,
}

impl Cursors {
    pub(crate) fn set_config(&self, config: ClaimCursorConfig) {
        *self.config.lock().unwrap_or_else(|e| e.into_inner()) = config;
    }

    fn config(&self) -> ClaimCursorConfig {
        *self.config.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn with<T>(&self, queue: &str, f: impl FnOnce(&mut QueueCursor) -> T) -> T {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if !queues.contains_key(queue) {
            queues.insert(queue.to_owned(), QueueCursor::default());
        }
        f(queues.get_mut(queue).expect("inserted above"))
    }

    pub(crate) fn mode(&self, queue: &str) -> ClaimStartMode {
        self.with(queue, |q| match q.last_head {
            Some(_) => ClaimStartMode::AfterCursor,
            None => ClaimStartMode::Head,
        })
    }

    /// Where the next claim of `queue` starts, at `now`.
    pub(crate) fn start(&self, queue: &str, now: DateTime<Utc>) -> Start {
        let every = self.config().head_every;
        self.with(queue, |q| match (q.last_head, q.last) {
            (Some(last_head), Some(key))
                if q.head_in_flight
                    || now < after(last_head, every.max(q.head_took * CLAIM_HEAD_SPACING)) =>
            {
                Start::After(key)
            }
            (Some(_), _) => {
                q.head_in_flight = true;
                q.last_head = Some(now);
                Start::Head { probe: true }
            }
            (None, _) => Start::Head { probe: false },
        })
    }

    /// Records a claim that started at `start`, asked for `limit` jobs, got `jobs` (`None`:
    /// it failed) and spent `took` in the database.
    ///
    /// The cursor moves to the greatest key claimed, except after a head claim that came
    /// back full: then it moves to that claim's last key even if that is lower, because more
    /// jobs may sort between it and the old cursor (a backlog of a higher priority).
    pub(crate) fn finish(
        &self,
        queue: &str,
        start: Start,
        limit: usize,
        jobs: Option<&[ClaimedJob]>,
        took: Duration,
        now: DateTime<Utc>,
    ) {
        let config = self.config();
        self.with(queue, |q| {
            let Start::Head { probe } = start else {
                q.last = q.last.max(jobs.and_then(greatest));
                return;
            };
            if probe {
                q.head_in_flight = false;
                q.head_took = took;
            }
            let Some(jobs) = jobs else { return };
            q.last = match greatest(jobs) {
                Some(key) if jobs.len() >= limit => Some(key),
                key => q.last.max(key),
            };
            if took < config.slow_head {
                q.slow_heads = 0;
                if probe {
                    q.last_head = None;
                    tracing::info!(queue, ?took, "head claims are fast again: claiming from the head");
                }
                return;
            }
            q.slow_heads = q.slow_heads.saturating_add(1);
            if q.last_head.is_none() && q.slow_heads >= config.slow_heads.max(1) && q.last.is_some() {
                q.last_head = Some(now);
                q.head_took = took;
                tracing::info!(
                    queue,
                    ?took,
                    "head claims are slow (dead index entries the horizon keeps?): claiming after the last claimed key"
                );
            }
        });
    }
}

/// The greatest key of `jobs`.
fn greatest(jobs: &[ClaimedJob]) -> Option<Key> {
    jobs.iter().map(Key::of).max()
}

/// `at + by`, saturating.
fn after(at: DateTime<Utc>, by: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(by)
        .ok()
        .and_then(|by| at.checked_add_signed(by))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}
