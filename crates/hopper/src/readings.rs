//! The whole-table readings (counts by queue and state, what finished per minute) shared
//! by every request that needs them: the HTTP API, the dashboard and `/metrics` of
//! `hopper-web`, and the `queue_stats` and `job_stats` requests of `hopper serve`'s ZeroMQ
//! server. Each reads the jobs table whole (there is no index on the finished states, which
//! would cost every completion), so with a day of finished jobs kept it takes about a
//! second on a few million rows, and the dashboard asks for three of them every two seconds
//! per open tab.
//!
//! Two rules bound what they cost the database:
//!
//! - **One reading at a time.** A request that arrives while a reading is being taken
//!   waits for it and uses it, instead of starting its own.
//! - **An expensive reading is reused.** One that took at least
//!   [`StatsReuse::above`] is served again for [`StatsReuse::factor`] times as long as it
//!   took (at most [`StatsReuse::at_most`]): the database spends at most a tenth of its
//!   time on each kind of reading, however many dashboards and scripts poll. A cheap
//!   reading (a small table) is never reused: the counts stay exact.
//!
//! One [`Readings`] serves every surface of a process that reads the same database: its
//! clones share the readings, so `hopper serve` gives the same one to its HTTP side
//! (`WebState::with_readings`) and its ZeroMQ server (`ServeConfig::readings`), and a
//! reading taken for either is served to both.
//!
//! It lives here, in the library both surfaces use, rather than in `hopper-core`: it waits
//! on an async lock and on tokio's clock (paused in its tests), and the core crate has no
//! runtime.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hopper_core::backend::MinuteStats;
use hopper_core::backend::QueueStats;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// When a reading is served again instead of taken anew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatsReuse {
    /// A reading that took less than this is never reused. Default 50 ms.
    pub above: Duration,
    /// One that took longer is reused for this many times as long as it took. Default 10.
    pub factor: u32,
    /// And for this long at most. Default a minute.
    pub at_most: Duration,
}

impl Default for StatsReuse {
    fn default() -> Self {
        StatsReuse {
            above: Duration::from_millis(50),
            factor: 10,
            at_most: Duration::from_secs(60),
        }
    }
}

impl StatsReuse {
    /// How long a reading that took `cost` is served again.
    fn fresh_for(&self, cost: Duration) -> Duration {
        if cost < self.above {
            return Duration::ZERO;
        }
        cost.saturating_mul(self.factor).min(self.at_most)
    }
}

/// One kind of reading: the last one taken, when and at what cost.
#[derive(Debug)]
struct Slot<T> {
    last: Mutex<Option<Taken<T>>>,
}

#[derive(Debug)]
struct Taken<T> {
    value: T,
    /// When the reading started: what it shows is at least this recent.
    started: Instant,
    cost: Duration,
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot {
            last: Mutex::new(None),
        }
    }
}

impl<T: Clone> Slot<T> {
    /// The last reading if it started after this request arrived (another request took it
    /// meanwhile) or is still fresh under `reuse`; else a new one from `read`. Failures
    /// are not kept.
    async fn get<E>(
        &self,
        reuse: &StatsReuse,
        read: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let arrived = Instant::now();
        let mut last = self.last.lock().await;
        if let Some(taken) = last.as_ref()
            && (taken.started >= arrived || taken.started.elapsed() < reuse.fresh_for(taken.cost))
        {
            return Ok(taken.value.clone());
        }
        let started = Instant::now();
        let value = read.await?;
        *last = Some(Taken {
            value: value.clone(),
            started,
            cost: started.elapsed(),
        });
        Ok(value)
    }
}

/// The shared readings of one database, each kind taken at most once at a time and reused
/// under a [`StatsReuse`]. Cheap to clone; clones share the readings. Give one only to
/// surfaces that read the same database: a reading is served to all of them.
#[derive(Debug, Clone, Default)]
pub struct Readings {
    reuse: StatsReuse,
    queues: Arc<Slot<Vec<QueueStats>>>,
    /// Per window, in minutes: the dashboard asks for one, scripts for a few others.
    minutes: Arc<std::sync::Mutex<MinuteSlots>>,
}

/// The per-minute readings by window (in minutes).
type MinuteSlots = HashMap<u32, Arc<Slot<Vec<MinuteStats>>>>;

/// The most windows whose per-minute readings are kept; past it, the map starts over.
const WINDOWS_KEPT: usize = 16;

impl Readings {
    /// Readings reused under `reuse` ([`Readings::default`]: under
    /// [`StatsReuse::default`]).
    pub fn new(reuse: StatsReuse) -> Self {
        Readings {
            reuse,
            ..Readings::default()
        }
    }

    /// When a reading is served again.
    pub fn reuse(&self) -> StatsReuse {
        self.reuse
    }

    /// The counts by queue and state: the last reading if it is still good under the
    /// reuse rules, else the one `read` takes (`read` is not polled when it is not needed).
    /// A failed reading is not kept.
    pub async fn queues<E>(
        &self,
        read: impl Future<Output = Result<Vec<QueueStats>, E>>,
    ) -> Result<Vec<QueueStats>, E> {
        self.queues.get(&self.reuse, read).await
    }

    /// What finished per minute over the last `window` minutes, as [`Readings::queues`]
    /// (each window is a reading of its own).
    pub async fn minutes<E>(
        &self,
        window: u32,
        read: impl Future<Output = Result<Vec<MinuteStats>, E>>,
    ) -> Result<Vec<MinuteStats>, E> {
        let slot = {
            let mut slots = self
                .minutes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if slots.len() >= WINDOWS_KEPT && !slots.contains_key(&window) {
                slots.clear();
            }
            slots.entry(window).or_default().clone()
        };
        slot.get(&self.reuse, read).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A reading that takes `cost` of the (paused) clock and counts itself in `reads`.
    async fn read(reads: &AtomicU32, cost: Duration) -> Result<u32, ()> {
        let n = reads.fetch_add(1, Ordering::SeqCst) + 1;
        tokio::time::sleep(cost).await;
        Ok(n)
    }

    #[tokio::test(start_paused = true)]
    async fn requests_arriving_together_share_one_reading() {
        let slot = Arc::new(Slot::<u32>::default());
        let reads = Arc::new(AtomicU32::new(0));
        let never = StatsReuse {
            above: Duration::MAX,
            ..StatsReuse::default()
        };
        let asks: Vec<_> = (0..8)
            .map(|_| {
                let (slot, reads) = (slot.clone(), reads.clone());
                tokio::spawn(async move {
                    slot.get(&never, read(&reads, Duration::from_millis(5)))
                        .await
                })
            })
            .collect();
        for ask in asks {
            assert_eq!(ask.await.expect("joined"), Ok(1));
        }
        // A request after that reading gets its own: a cheap reading is never reused.
        assert_eq!(slot.get(&never, read(&reads, Duration::ZERO)).await, Ok(2));
    }

    #[tokio::test(start_paused = true)]
    async fn an_expensive_reading_is_served_for_ten_times_its_cost() {
        let slot = Slot::<u32>::default();
        let reads = AtomicU32::new(0);
        let reuse = StatsReuse::default();
        let slow = Duration::from_millis(100);
        assert_eq!(slot.get(&reuse, read(&reads, slow)).await, Ok(1));
        tokio::time::advance(Duration::from_millis(850)).await;
        assert_eq!(slot.get(&reuse, read(&reads, slow)).await, Ok(1), "reused");
        tokio::time::advance(Duration::from_millis(100)).await;
        assert_eq!(
            slot.get(&reuse, read(&reads, slow)).await,
            Ok(2),
            "taken anew"
        );
        // A failure is not kept: the next request reads again.
        let failed: Result<u32, ()> = slot
            .get(
                &StatsReuse {
                    above: Duration::MAX,
                    ..reuse
                },
                async { Err(()) },
            )
            .await;
        assert_eq!(failed, Err(()));
        assert_eq!(
            slot.get(&reuse, read(&reads, slow)).await,
            Ok(2),
            "still fresh"
        );
    }

    #[test]
    fn only_an_expensive_reading_is_reused_for_a_bounded_time() {
        let reuse = StatsReuse::default();
        assert_eq!(reuse.fresh_for(Duration::from_millis(3)), Duration::ZERO);
        assert_eq!(
            reuse.fresh_for(Duration::from_millis(1200)),
            Duration::from_secs(12)
        );
        assert_eq!(
            reuse.fresh_for(Duration::from_secs(30)),
            Duration::from_secs(60)
        );
    }
}
