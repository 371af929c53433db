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

use hopper_core::{QueueSettings, RateLimit, Result, Wakeup};
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

/// The rate bucket of a limited queue at the instant of a claim.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    /// Tokens after refilling up to now.
    pub tokens: f64,
    /// Tokens added per millisecond.
    pub per_ms: f64,
}

impl Bucket {
    /// Refills a bucket that held `tokens` at `refilled_at` up to `now`, capped at the
    /// burst. A bucket never refilled starts full.
    pub fn refill(
        rate: &RateLimit,
        tokens: f64,
        refilled_at: Option<chrono::DateTime<chrono::Utc>>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Self {
        let per_ms = f64::from(rate.jobs) / rate.per.as_millis().max(1) as f64;
        let burst = f64::from(rate.burst);
        let tokens = match refilled_at {
            None => burst,
            Some(at) => {
                let elapsed = (now - at).num_microseconds().unwrap_or(i64::MAX).max(0) as f64;
                (tokens + elapsed / 1000.0 * per_ms).min(burst)
            }
        };
        Bucket { tokens, per_ms }
    }

    /// Whole tokens available now.
    pub fn whole(&self) -> u32 {
        self.tokens.max(0.0).floor().min(f64::from(u32::MAX)) as u32
    }

    /// How long until the bucket holds a whole token after `taken` are taken.
    pub fn next_token_in(&self, taken: u32) -> Duration {
        let left = self.tokens - f64::from(taken);
        let missing = (1.0 - left).max(0.0);
        Duration::from_micros((missing / self.per_ms * 1000.0).ceil().max(0.0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_refill_at_the_rate_and_cap_at_the_burst() {
        let rate = RateLimit::new(100, Duration::from_secs(1));
        let t0 = chrono::Utc::now();
        let full = Bucket::refill(&rate, 0.0, None, t0);
        assert_eq!(full.whole(), 10);
        let later = t0 + chrono::Duration::milliseconds(50);
        assert_eq!(Bucket::refill(&rate, 0.0, Some(t0), later).whole(), 5);
        let much_later = t0 + chrono::Duration::seconds(60);
        assert_eq!(Bucket::refill(&rate, 0.0, Some(t0), much_later).whole(), 10);
        let empty = Bucket::refill(&rate, 0.0, Some(t0), t0);
        assert_eq!(empty.next_token_in(0), Duration::from_millis(10));
    }
}
