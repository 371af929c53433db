//! The workers' cache of queue settings, which picks the claim statement for each queue.
//!
//! Claiming must stay one index scan for queues that use no scheduling feature, so the
//! claim path never reads `queues` itself: it asks this cache. The cache holds every row
//! of the (tiny) `queues` table, reloaded when older than [`MAX_AGE`] or at once after a
//! `q:<queue>` notification (pause, resume, limits, a queue becoming grouped). A paused
//! queue is therefore not claimed from on any node within [`MAX_AGE`] of the change, and
//! usually within milliseconds.
//!
//! The cache also holds, per grouped queue, the fair claim's ring (the groups with ready
//! jobs, and the rotation cursor: [`ring`]) and remembers when a limited queue is worth
//! claiming again (see [`Cache::arm`]).

pub mod ring;

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hopper_core::{QueueSettings, Result, Wakeup};
use tokio::sync::broadcast;
use tokio::time::Instant;

/// Settings older than this are reloaded before a claim or an insert uses them.
pub const MAX_AGE: Duration = Duration::from_millis(500);

/// How soon a claim cut short by a concurrency limit is tried again (jobs finishing on
/// other nodes send no notification).
pub const LIMIT_RETRY: Duration = Duration::from_millis(25);

/// The statement a queue is claimed with.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimMode {
    /// No claims.
    Paused,
    /// `job_claim.sql`: one index scan, no lock.
    Plain,
    /// `job_claim_fair.sql` alone: groups take turns, no lock.
    Fair,
    /// `queue_lock.sql`, then `job_claim_limited.sql` or `job_claim_fair.sql`.
    Limited {
        /// Whether the queue has groups.
        fair: bool,
    },
}

#[derive(Debug, Default)]
struct State {
    settings: HashMap<String, QueueSettings>,
    loaded_at: Option<Instant>,
    armed: HashMap<String, Instant>,
}

/// See the module docs.
#[derive(Debug)]
pub struct Cache {
    state: Mutex<State>,
    stale: AtomicBool,
    reloading: tokio::sync::Mutex<()>,
    local_wake: broadcast::Sender<Wakeup>,
    /// The fair claim's rings, per grouped queue.
    pub rings: ring::Rings,
}

impl Cache {
    /// An empty cache, loaded on first use. `local_wake` carries the wake-ups it arms.
    pub fn new(local_wake: broadcast::Sender<Wakeup>) -> Self {
        Cache {
            state: Mutex::new(State::default()),
            stale: AtomicBool::new(true),
            reloading: tokio::sync::Mutex::new(()),
            local_wake,
            rings: ring::Rings::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Marks the cache stale: the next use reloads it. Called on `q:` notifications.
    pub fn invalidate(&self) {
        self.stale.store(true, Ordering::Release);
    }

    fn needs_reload(&self) -> bool {
        self.stale.load(Ordering::Acquire)
            || self
                .state()
                .loaded_at
                .is_none_or(|at| at.elapsed() >= MAX_AGE)
    }

    /// Reloads with `load` if stale. One caller reloads; the others keep using the
    /// previous settings meanwhile, except before the first load, which they wait for.
    pub async fn refresh<F, Fut>(&self, load: F) -> Result<()>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Vec<QueueSettings>>>,
    {
        if !self.needs_reload() {
            return Ok(());
        }
        let never_loaded = self.state().loaded_at.is_none();
        let _guard = if never_loaded {
            self.reloading.lock().await
        } else {
            match self.reloading.try_lock() {
                Ok(guard) => guard,
                Err(_) => return Ok(()),
            }
        };
        if !self.needs_reload() {
            return Ok(());
        }
        self.stale.store(false, Ordering::Release);
        match load().await {
            Ok(rows) => {
                let mut state = self.state();
                state.settings = rows.into_iter().map(|s| (s.queue.clone(), s)).collect();
                state.loaded_at = Some(Instant::now());
                Ok(())
            }
            Err(e) => {
                self.stale.store(true, Ordering::Release);
                Err(e)
            }
        }
    }

    /// The cached settings of `queue`, if it has any.
    pub fn get(&self, queue: &str) -> Option<QueueSettings> {
        self.state().settings.get(queue).cloned()
    }

    /// True when `queue` is known to have groups.
    pub fn is_grouped(&self, queue: &str) -> bool {
        self.state().settings.get(queue).is_some_and(|s| s.grouped)
    }

    /// Records that `queue` now has groups (until the next reload confirms it).
    pub fn set_grouped(&self, queue: &str) {
        let mut state = self.state();
        let entry = state
            .settings
            .entry(queue.to_owned())
            .or_insert_with(|| QueueSettings {
                queue: queue.to_owned(),
                ..QueueSettings::default()
            });
        entry.grouped = true;
    }

    /// How `queue` is claimed, by its cached settings.
    pub fn mode(&self, queue: &str) -> ClaimMode {
        let state = self.state();
        let Some(s) = state.settings.get(queue) else {
            return ClaimMode::Plain;
        };
        if s.paused {
            ClaimMode::Paused
        } else if s.is_limited() {
            ClaimMode::Limited { fair: s.grouped }
        } else if s.grouped {
            ClaimMode::Fair
        } else {
            ClaimMode::Plain
        }
    }

    /// Wakes this process's claimers of `queue` now (rows they may have skipped are free).
    pub fn wake(&self, queue: &str) {
        let _ = self.local_wake.send(Wakeup::Jobs(queue.to_owned()));
    }

    /// Wakes this process's claimers of `queue` after `delay` (a limited queue that will
    /// have room then: a rate token, or a running job finished elsewhere). One timer per
    /// queue at a time: an earlier one already armed makes this a no-op.
    pub fn arm(&self, queue: &str, delay: Duration) {
        let at = Instant::now() + delay;
        {
            let mut state = self.state();
            if let Some(armed) = state.armed.get(queue)
                && *armed > Instant::now()
                && *armed <= at
            {
                return;
            }
            state.armed.insert(queue.to_owned(), at);
        }
        let wake = self.local_wake.clone();
        let queue = queue.to_owned();
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let _ = wake.send(Wakeup::Jobs(queue));
        });
    }
}
